"""Head scores kept in the cache: `edgeprune score` then a fit of the same model with the same scoring settings
scores nothing again and ranks, decides and estimates exactly as the first did; other settings score anew; a damaged
entry is one warning and scored again."""

import io
import json

import numpy as np
import pytest

import edgeprune.search.scoring as scoring
from edgeprune.cache import list_entries
from edgeprune.cli import main
from edgeprune.importance import HeadScores
from edgeprune.progress import Progress
from edgeprune.search.journal import Journal
from edgeprune.search.options import FitOptions
from edgeprune.search.scores_cache import SCORES_FOLDER
from edgeprune.search.scoring import journaled_head_scores, scoring_decision
from edgeprune.search.shared import SharedWork, dense_head_means
from edgeprune.search.space import Shape
from edgeprune.tasks import bundled_task

EXAMPLES, MAX_LENGTH = 32, 32


@pytest.fixture
def counted_scoring(monkeypatch):
    """How many times the candidate scorings were compared (each comparison scores and measures every candidate)."""
    calls = []
    compare = scoring.choose_scoring

    def counting(*args, **kwargs):
        calls.append(kwargs.get("candidates"))
        return compare(*args, **kwargs)

    monkeypatch.setattr(scoring, "choose_scoring", counting)
    return calls


def fit_scores(tiny_bert_dir, tmp_path, options: FitOptions, name: str) -> tuple[HeadScores, Journal, str]:
    """The head scores a fit with `options` ranks by (its own scoring step, as `fit` calls it), its journal, and
    what it printed."""
    printed = io.StringIO()
    task = bundled_task("minilm-bbc", model_path=tiny_bert_dir, max_length=MAX_LENGTH,
                        progress=Progress(enabled=True, stream=printed, bars=False))
    teacher = task.teacher()
    means = dense_head_means(teacher.model, task, options, SharedWork()) if options.compensate else None
    journal = Journal(tmp_path / f"{name}.jsonl", {}, resume=False)
    scores = journaled_head_scores(task, teacher.model, options, task.progress, journal, SharedWork(),
                                   teacher.validation, means)
    return scores, journal, printed.getvalue()


def test_a_fit_after_score_takes_the_scores_from_the_cache_and_decides_as_the_first(tiny_bert_dir, tmp_path, capsys,
                                                                                     counted_scoring):
    flags = ["--model", str(tiny_bert_dir), "--max-length", str(MAX_LENGTH), "--examples", str(EXAMPLES)]
    assert main(["score", *flags, "--out", str(tmp_path / "scores.json")]) == 0
    assert len(counted_scoring) == 1 and "head scores loaded from cache" not in capsys.readouterr().err
    written = HeadScores.from_dict(json.loads((tmp_path / "scores.json").read_text()))
    entries = [e for e in list_entries() if e.kind == SCORES_FOLDER]
    assert len(entries) == 1 and entries[0].size_bytes > 0

    # the same command again: the comparison does not run, the file is the same
    assert main(["score", *flags, "--out", str(tmp_path / "again.json")]) == 0
    assert len(counted_scoring) == 1
    assert f"head scores loaded from cache {entries[0].path}" in capsys.readouterr().err
    assert (tmp_path / "again.json").read_text() == (tmp_path / "scores.json").read_text()

    # a fit with the same scoring settings: the same ranking and decision, the winner's estimate journaled as the
    # search's for that structure, as if it had just been measured
    scores, journal, printed = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=EXAMPLES), "fit")
    assert len(counted_scoring) == 1 and "head scores loaded from cache" in printed
    assert scores == written and journal.scores == written.to_dict()
    decision = scoring_decision(scores)
    chosen = decision.trials[decision.chosen].quality
    assert journal.proxies[Shape(decision.heads_removed).key]["value"] == chosen.value


def test_other_scoring_settings_score_anew_each_in_an_entry_of_its_own(tiny_bert_dir, tmp_path, counted_scoring):
    first, _, _ = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=EXAMPLES), "a")
    fewer, _, _ = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=16), "b")
    zscore, _, _ = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=EXAMPLES, normalize="zscore"), "c")
    assert len(counted_scoring) == 3 and fewer.num_examples == 16 and first.num_examples == EXAMPLES
    assert [choice.normalize for choice in counted_scoring[2]] == ["zscore", "zscore"]
    named, journal, _ = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=EXAMPLES, criterion="taylor"),
                                   "named")
    again, _, printed = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=EXAMPLES, criterion="taylor"),
                                   "named-again")
    assert named.criterion == "taylor" and scoring_decision(named) is None and not journal.proxies
    assert again == named and "head scores loaded from cache" in printed
    assert len(counted_scoring) == 3
    assert len([e for e in list_entries() if e.kind == SCORES_FOLDER]) == 4


def test_a_damaged_entry_is_one_warning_and_the_heads_are_scored_again(tiny_bert_dir, tmp_path, counted_scoring):
    first, _, _ = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=EXAMPLES), "a")
    [entry] = [e.path for e in list_entries() if e.kind == SCORES_FOLDER]
    entry.write_bytes(entry.read_bytes()[:100])  # what a killed copy or a full disk leaves
    again, _, printed = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=EXAMPLES), "b")
    assert len(counted_scoring) == 2 and printed.count(f"damaged cache entry {entry}: rebuilt") == 1
    assert np.array_equal(again.scores, first.scores)  # scored again: the same ranking, other seconds
    third, _, printed = fit_scores(tiny_bert_dir, tmp_path, FitOptions(scoring_examples=EXAMPLES), "c")
    assert len(counted_scoring) == 2 and third == again and "head scores loaded from cache" in printed
