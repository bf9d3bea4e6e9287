"""Recovery inside fit: every built structure (heads, FFN neurons, layers, a trimmed vocabulary) is distilled from
the dense teacher; a structure with more heads removed on the same line starts from the recovered weights of the
one before it; the artifact is the recovered model; the search's bound is measured after recovery."""

import json

import pytest
import torch

from edgeprune.devices import load_profile
from edgeprune.export import load_artifact
from edgeprune.importance import score_heads
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning.ffn import intermediate_sizes
from edgeprune.quantize import FP32_RECIPE, RECIPES
from edgeprune.search.benchmarkers import this_machine
from edgeprune.search.budget import Budget
from edgeprune.search.builder import CandidateBuilder
from edgeprune.search.journal import Journal
from edgeprune.search.options import FitOptions
from edgeprune.search.recovering import heads_beyond, recover, recovered_key
from edgeprune.search.size_probe import budget_probe
from edgeprune.search.space import Shape
from edgeprune.tasks import make_task
from tests._byo import topic_rows, write_csv
from tests.test_fit_resume_and_budgets import Recorder


def heads_of(model: torch.nn.Module) -> list[list[int]]:
    return [list(block.original_heads) for block in adapter_for(model).attention_blocks(model)]


def first_output(outputs) -> torch.Tensor:
    if isinstance(outputs, torch.Tensor):
        return outputs.detach()
    return (outputs.logits if hasattr(outputs, "logits") else outputs[0]).detach()


@pytest.fixture
def recovering(tiny_bert_dir, tmp_path):
    def make(**options) -> tuple[CandidateBuilder, Recorder]:
        task = make_task("classification", tiny_bert_dir, write_csv(tmp_path / "d.csv", topic_rows(12)),
                         max_length=16, progress=Progress(enabled=False))
        teacher = task.teacher().model
        scores = score_heads(teacher, task.batches("calibration", 8), "taylor",
                             loss_fn=task.loss).normalize_per_layer()
        notes = Recorder()
        options = FitOptions(recover_steps=3, scoring_examples=8, **options)
        profile = load_profile("host")
        builder = CandidateBuilder(teacher, scores, task, options, tmp_path, notes, "executorch", profile,
                                   this_machine(options, profile),
                                   Journal(tmp_path / "journal.jsonl", {}, False), vocabulary=task.vocabulary())
        return builder, notes
    return make


def test_a_more_pruned_candidate_reuses_the_previous_recovered_weights(recovering):
    builder, notes = recovering()
    teacher = builder.teacher
    first = recover(builder, Shape(3))
    assert not any("recovering from" in n for n in notes.notes)
    assert any(n.strip().startswith("recovered 3 heads removed in") for n in notes.notes)
    second = recover(builder, Shape(6))
    assert "  recovering from the recovered candidate with 3 heads removed" in notes.notes
    kept = [b.num_heads for b in adapter_for(second).attention_blocks(second)]
    assert sum(kept) == 12 - 6 and kept == [len(k) for k in builder.facts.plan(6).kept_heads]
    # the recovered candidates are trained copies: the teacher and the first candidate are untouched
    assert sum(b.num_heads for b in adapter_for(first).attention_blocks(first)) == 9
    assert sum(b.num_heads for b in adapter_for(teacher).attention_blocks(teacher)) == 12


def test_ffn_and_layer_structures_recover_along_their_line_to_the_structure_fit_would_cut(recovering):
    builder, notes = recovering(ffn_fractions=(0.0, 0.5), layer_removals=(0, 1))
    recover(builder, Shape(2, 0.5, 1))
    again = recover(builder, Shape(5, 0.5, 1))
    assert "  recovering from the recovered candidate with 2 heads removed, FFN −50%, 1 layer removed" in notes.notes
    direct = builder.facts.pruned(Shape(5, 0.5, 1))  # the same structure cut from the teacher in one go
    assert heads_of(again) == heads_of(direct)
    assert intermediate_sizes(again) == intermediate_sizes(direct) == [32, 32]
    assert len(adapter_for(again).attention_blocks(again)) == 2  # 3 layers, 1 removed
    # another line (no FFN removed) never starts from this one's weights
    recover(builder, Shape(5, 0.0, 1))
    assert sum("recovering from" in n for n in notes.notes) == 1


def test_the_heads_beyond_a_pruned_model_are_named_by_its_own_layer_indices(recovering):
    builder, _ = recovering(layer_removals=(0, 1))
    parent = builder.facts.pruned(Shape(2, 0.0, 1))
    plan = builder.facts.plan(5, 1)
    removal = heads_beyond(parent, plan.kept_heads, builder.facts.removed_layers(1))
    stayed = [layer for layer in range(3) if layer not in builder.facts.removed_layers(1)]
    assert set(removal) <= {0, 1}
    for index, layer in enumerate(stayed):
        assert sorted(set(heads_of(parent)[index]) - set(removal.get(index, []))) == sorted(plan.kept_heads[layer])


def test_the_artifact_of_a_recovered_structure_is_the_recovered_model_trimmed(recovering):
    builder, _ = recovering(ffn_fractions=(0.0, 0.5), layer_removals=(0, 1))
    shape = Shape(4, 0.5, 1, trim_vocabulary=True)
    recipe = RECIPES.get(FP32_RECIPE["executorch"])
    artifact = builder.build(shape, recipe, "recovered.pte", "candidate")
    recovered = builder.shared.recovered[shape.structure].model  # full vocabulary: the teacher's inputs
    assert artifact.recovery.startswith("distilled from the dense teacher for 3 steps") and "pruned teacher" in (
        artifact.recovery)
    unrecovered = builder.facts.pruned(shape.structure)
    run = load_artifact(builder.work / artifact.path)
    for inputs in builder.task.example_inputs("validation", 3):
        expected = first_output(recovered(*inputs))
        got = run(*builder.artifacts.remap(inputs, True))[0]
        assert torch.allclose(got, expected, atol=1e-4)
        before = first_output(unrecovered(*inputs))
        assert not torch.allclose(before, expected, atol=1e-3)  # recovery changed the model that was exported
    assert artifact.vocabulary_size is not None and artifact.vocabulary_size < builder.vocabulary.original_size


def test_a_candidate_predicted_over_the_size_budget_is_measured_before_it_is_recovered(recovering):
    builder, notes = recovering(ffn_fractions=(0.0, 0.5), layer_removals=(0, 1))
    recipe, reference = RECIPES.get("int8"), builder.proxy(Shape())
    shape = Shape(4, 0.5, 1, trim_vocabulary=True)
    recovered = builder.build(shape, recipe, "recovered.pte", "candidate")  # recovers and exports
    unrecovered = builder.build(Shape(2, 0.5, 1, trim_vocabulary=True), recipe, "plain.pte", "candidate",
                                recover=False)
    assert unrecovered.recovery == "" and Shape(2, 0.5, 1).structure not in builder.shared.recovered
    probe = builder.build(shape, recipe, "probe.pte", "candidate", recover=False)
    # the same shapes, yet 2,560 bytes smaller here: the exporter stores bitwise-equal tensors once, and this random
    # tiny BERT's LayerNorms are all ones and zeros until recovery moves them apart. Never larger: what is equal
    # after distillation was equal before it.
    assert probe.file_bytes <= recovered.file_bytes
    predicted = builder.predict_bytes(Shape(2, 0.5, 1, True), recipe)

    over = Budget(max_mb=(unrecovered.file_bytes - 1) / 1e6)  # predicted over, and over once measured
    assert predicted > over.max_mb * 1e6
    artifact = builder.candidate(recipe, Shape(2, 0.5, 1, True), over, reference)
    assert artifact.file_bytes == unrecovered.file_bytes and artifact.recovery == ""
    assert "measured on the unrecovered structure" in artifact.note and artifact.validation_quality is None
    assert Shape(2, 0.5, 1).structure not in builder.shared.recovered  # no distillation spent on it
    assert not any(n.strip().startswith("recovered 2 heads removed") for n in notes.notes)

    # at the limit (within the size model's slack): probed, found to fit, then recovered and built as ever
    shape = Shape(3, 0.5, 1, True)
    unrecovered = builder.build(shape, recipe, "size.pte", "measuring", recover=False).file_bytes
    margin = builder.facts.size_overrun(recipe, shape)
    assert builder.predict_bytes(shape, recipe) > unrecovered * (1 - margin)
    artifact = builder.candidate(recipe, shape, Budget(max_mb=unrecovered / 1e6), reference)
    assert artifact.recovery.startswith("distilled from the dense teacher") and "unrecovered" not in artifact.note
    builds = [n for n in notes.notes if n.startswith("candidate: int8, 3 heads removed, FFN −50%, 1 layer removed")]
    assert len(builds) == 2  # the probe's export, then the recovered model's

    # clearly under the budget (beyond the slack): recovered and built once, no probe
    shape = Shape(5, 0.5, 1, True)
    roomy = Budget(max_mb=builder.predict_bytes(shape, recipe) / (1 - 2 * margin) / 1e6)
    artifact = builder.candidate(recipe, shape, roomy, reference, best=float("inf"))  # no benchmark: no device here
    assert artifact.recovery.startswith("distilled from the dense teacher")
    builds = [n for n in notes.notes if n.startswith("candidate: int8, 5 heads removed, FFN −50%, 1 layer removed")]
    assert len(builds) == 1  # the recovered model's export only


def test_a_candidate_predicted_too_slow_is_benchmarked_before_it_is_recovered(recovering):
    builder, _ = recovering(bench_runs=20, bench_warmup=1)
    recipe, reference, shape = RECIPES.get("int8"), builder.proxy(Shape()), Shape(2)
    builder.facts.latency_model.observe("int8", builder.facts.flops(Shape()), 1000.0)  # a calibrated model: slow
    slow = Budget(max_latency_ms=0.001)  # 1 µs: any real measurement is over it
    artifact = builder.candidate(recipe, shape, slow, reference)
    assert artifact.benchmark is not None and artifact.benchmark.p50_ms > slow.max_latency_ms  # measured: too slow
    assert "over the latency p50 budget, measured on the unrecovered structure" in artifact.note
    assert artifact.recovery == "" and shape.structure not in builder.shared.recovered
    assert artifact.validation_quality is None and not artifact.meets_budget
    expected = 1000.0 * builder.facts.flops(shape) / builder.facts.flops(Shape())  # one measurement: scaled by FLOPs
    assert artifact.predicted_latency_ms == pytest.approx(expected)  # the prediction kept beside the measurement

    artifact = builder.candidate(recipe, Shape(3), slow, reference, probe=False)  # the closest candidate: in full
    assert artifact.recovery.startswith("distilled from the dense teacher") and artifact.note == ""


def test_a_candidate_predicted_near_the_latency_budget_on_either_side_is_probed(recovering, monkeypatch):
    """The latency model's error is wider than the gap between a prediction just under the budget and a
    measurement over it: within the model's slack below the budget, the unrecovered structure is measured first;
    beyond it, recovery goes ahead unprobed."""
    builder, _ = recovering()
    recipe, shape = RECIPES.get("int8"), Shape(2)
    builder.facts.latency_model.observe("int8", builder.facts.flops(Shape()), 10.0)
    predicted = builder.predict_latency(shape, recipe)
    probes = []

    def build(shape, recipe, name, label, recover=True):  # noqa: ANN001, ANN202 - stands in for the export
        probes.append(recover)
        raise KeyboardInterrupt  # far enough: the probe's export was started

    monkeypatch.setattr(builder, "build", build)
    slack = builder.latency_slack(recipe)
    assert slack > 1.05
    with pytest.raises(KeyboardInterrupt):  # predicted 5 % under the budget: probed
        budget_probe(builder, shape, recipe, Budget(max_latency_ms=predicted * 1.05), "probe.pte")
    assert probes == [False]
    # predicted beyond the slack under the budget: recovered without a probe
    assert budget_probe(builder, shape, recipe, Budget(max_latency_ms=predicted * slack * 1.01), "probe.pte") is None
    assert probes == [False]


def test_a_probe_that_fails_verification_leaves_the_verdict_to_the_recovered_candidate(recovering, monkeypatch):
    """The probe exports the unrecovered weights, which are not the candidate's: its verification failure does not
    reject the recipe for the fit (nothing is raised); the candidate is recovered and verified itself."""
    from edgeprune.errors import VerificationError

    builder, notes = recovering()
    recipe, shape = RECIPES.get("int8"), Shape(2)
    builder.facts.latency_model.observe("int8", builder.facts.flops(Shape()), 10.0)
    builds = []

    def build(shape, recipe, name, label, recover=True):  # noqa: ANN001, ANN202 - stands in for the export
        builds.append(recover)
        raise VerificationError("cosine 0.98 < 0.99 required")

    monkeypatch.setattr(builder, "build", build)
    budget = Budget(max_latency_ms=builder.predict_latency(shape, recipe) * 1.05)  # near: probed
    assert budget_probe(builder, shape, recipe, budget, "probe.pte") is None
    assert builds == [False]
    assert any("probe failed verification (cosine 0.98 < 0.99 required)" in n for n in notes.notes)
    with pytest.raises(VerificationError):  # the recovered candidate's own verification still decides
        builder.candidate(recipe, shape, budget, builder.proxy(Shape()))
    assert builds == [False, False, True]


def test_the_search_bound_is_measured_after_recovery_and_borrowed_before(recovering):
    builder, _ = recovering(ffn_fractions=(0.0, 0.5), layer_removals=(0, 1))
    unrecovered = builder.proxy(Shape(4, 0.5, 1))
    teacher = builder.proxy(Shape())
    assert builder.bound(Shape(4, 0.5, 1)) == teacher  # nothing recovered yet: the dense teacher's quality
    assert builder.bound(Shape()) == teacher
    recover(builder, Shape(2, 0.5, 1))
    measured = builder.journal.proxies[recovered_key(Shape(2, 0.5, 1))]
    assert builder.proxy(Shape(2, 0.5, 1)).value == measured["value"]  # the estimate is now the recovered one
    assert builder.bound(Shape(2, 0.5, 1, trim_vocabulary=True)).value == measured["value"]
    # a more compressed structure is bounded by the worse of the recovered one and the teacher, plus how far the
    # recovered one measured above the teacher (students can beat a random teacher)
    excess = max(0.0, measured["value"] - teacher.value)
    expected = min(measured["value"], teacher.value) + excess
    assert builder.bound(Shape(4, 0.5, 1)).value == pytest.approx(expected)
    assert builder.bound(Shape(2, 0.5, 2)).value == pytest.approx(expected)
    assert builder.bound(Shape(4, 0.0, 1)).value == pytest.approx(teacher.value + excess)  # not below (2, 0.5, 1)
    assert builder.proxy(Shape(4, 0.5, 1)) == unrecovered  # not recovered: still the unrecovered estimate


@pytest.mark.integration
def test_fit_recovers_every_structure_it_builds_through_the_cli(small_bert_dir, small_bert_int8_bytes, tmp_path,
                                                                capsys):
    """The user's run: a budget reachable by heads, FFN width, a removed layer or a trimmed vocabulary, with
    recovery; every pruned candidate built was distilled first, and the report says how the fitted one was."""
    from edgeprune.cli import main
    from tests.test_fit_integration import FAST

    budget_mb = (small_bert_int8_bytes(2) + small_bert_int8_bytes(3)) / 2e6
    out = tmp_path / "recovered"
    code = main(["fit", "--model", str(small_bert_dir), "--max-mb", f"{budget_mb:.6f}", "--recipe", "int8",
                 "--ffn-fractions", "0,0.5", "--recover-steps", "6", "--out", str(out), "--json", *FAST])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result["message"]
    # every pruned candidate built, the fitted one included (the search may build no other: on one thread its estimates
    # on this random model fall otherwise than on two)
    pruned = [c for c in result["candidates"] if c["label"] in ("candidate", "fitted") and (
        c["plan"]["heads"]["heads_removed"] or c["ffn_fraction"] or c["layers_removed"])]
    assert pruned and all(c["recovery"].startswith("distilled from the dense teacher for 6 steps") for c in pruned)
    fitted = result["fitted"]
    assert fitted["recovery"] and fitted["file_bytes"] <= budget_mb * 1e6
    assert f"Fitted model recovered: {fitted['recovery']}." in (out / "report.md").read_text()
    assert result["dense"]["recovery"] == ""


@pytest.mark.parametrize("shape", [Shape(), Shape(6), Shape(4, 0.25, 1), Shape(44, 0.5, 2, True)])
def test_a_shape_is_read_back_from_its_journal_key(shape):
    assert Shape.from_key(shape.key) == shape and recovered_key(shape) == f"{shape.structure.key}-recovered"
    with pytest.raises(ValueError, match="not a shape key"):
        Shape.from_key(f"{shape.key}-recovered")


def test_the_dense_structures_estimate_is_the_teachers_and_the_measured_ones_are_listed(tiny_bert_dir, tmp_path):
    task = make_task("classification", tiny_bert_dir, write_csv(tmp_path / "d.csv", topic_rows(12)),
                     max_length=16, progress=Progress(enabled=False))
    teacher = task.teacher()
    scores = score_heads(teacher.model, task.batches("calibration", 8), "taylor", loss_fn=task.loss)
    options, profile, notes = FitOptions(scoring_examples=8), load_profile("host"), Recorder()
    builder = CandidateBuilder(teacher.model, scores.normalize_per_layer(), task, options, tmp_path, notes,
                               "executorch", profile, this_machine(options, profile),
                               Journal(tmp_path / "journal.jsonl", {}, False), teacher_validation=teacher.validation)
    assert builder.measured_estimates() == {Shape(): teacher.validation}  # what the searcher ranks the rest by
    assert builder.unrecovered_proxy(Shape()) == teacher.validation
    assert builder.journal.proxies[Shape().key]["value"] == teacher.validation.value
    assert not any("PyTorch estimate" in n for n in notes.notes)  # nothing measured again
    three = builder.unrecovered_proxy(Shape(3, trim_vocabulary=True))
    assert sum("PyTorch estimate" in n for n in notes.notes) == 1
    assert builder.measured_estimates() == {Shape(): teacher.validation, Shape(3): three}
