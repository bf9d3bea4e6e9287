"""Recovery inside fit: a pruned candidate is distilled from the dense teacher, and a later candidate with more
heads removed starts from the recovered weights of the one before it instead of from scratch."""

from edgeprune.devices import load_profile
from edgeprune.importance import score_heads
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.search.builder import CandidateBuilder
from edgeprune.search.journal import Journal
from edgeprune.search.options import FitOptions
from edgeprune.tasks import make_task
from tests._byo import topic_rows, write_csv
from tests.test_fit_resume_and_budgets import Recorder


def test_a_more_pruned_candidate_reuses_the_previous_recovered_weights(tiny_bert_dir, tmp_path):
    task = make_task("classification", tiny_bert_dir, write_csv(tmp_path / "d.csv", topic_rows(12)), max_length=16,
                     progress=Progress(enabled=False))
    teacher = task.teacher().model
    scores = score_heads(teacher, task.batches("calibration", 8), "taylor", loss_fn=task.loss).normalize_per_layer()
    notes = Recorder()
    builder = CandidateBuilder(teacher, scores, task, FitOptions(recover_steps=3, scoring_examples=8), tmp_path, notes,
                               "executorch", load_profile("host"), None, Journal(tmp_path / "journal.jsonl", {}, False))
    first = builder.recovered(builder.plan(3))
    assert not any("recovering from" in n for n in notes.notes)
    assert any(n.strip().startswith("recovered in") for n in notes.notes)
    second = builder.recovered(builder.plan(6))
    assert "  recovering from the recovered 3-heads-removed candidate" in notes.notes
    kept = [b.num_heads for b in adapter_for(second).attention_blocks(second)]
    assert sum(kept) == 12 - 6 and kept == [len(k) for k in builder.plan(6).kept_heads]
    # the recovered candidates are trained copies: the teacher and the first candidate are untouched
    assert sum(b.num_heads for b in adapter_for(first).attention_blocks(first)) == 9
    assert sum(b.num_heads for b in adapter_for(teacher).attention_blocks(teacher)) == 12
