"""The step-by-step path with its defaults builds what `fit` builds: `edgeprune score` → `prune` (and
`score_heads` → `prune` in Python) make fit's choice of criterion, normalization and bias compensation, so the
same plan gives the same pruned weights as fit's candidate builder; `prune --no-compensate` does not."""

import copy
import json

import pytest
import torch

import edgeprune
from edgeprune.cli import main
from edgeprune.devices import load_profile
from edgeprune.progress import Progress
from edgeprune.search.benchmarkers import this_machine
from edgeprune.search.builder import CandidateBuilder
from edgeprune.search.journal import Journal
from edgeprune.search.options import FitOptions
from edgeprune.search.scoring import journaled_head_scores, normalization
from edgeprune.search.space import Shape
from edgeprune.tasks import bundled_task
from edgeprune.tasks.base import input_batches

EXAMPLES, MAX_LENGTH, REMOVE = 32, 32, 5


def _fits_builder(model_dir, work):
    """Fit's own scoring and candidate builder on the task the CLI flags below describe."""
    task = bundled_task("minilm-bbc", model_path=model_dir, max_length=MAX_LENGTH, progress=Progress(enabled=False))
    options = FitOptions(scoring_examples=EXAMPLES)
    dense = task.teacher()
    teacher = dense.model
    journal = Journal(work / "journal.jsonl", {}, resume=False)
    scores = journaled_head_scores(task, teacher, options, task.progress, journal, reference=dense.validation)
    ranked = scores.normalize_per_layer(normalization(scores, options))  # as fit_task ranks them
    builder = CandidateBuilder(teacher, ranked, task, options, work, task.progress, "executorch",
                               load_profile("host"), this_machine(options), journal)
    return task, teacher, scores, builder


def _encoder_state(model):
    return {k: v for k, v in model.state_dict().items() if not k.startswith("pooler.")}


def _differing(state, reference):
    return [name for name in reference if not torch.allclose(state[name], reference[name], rtol=1e-4, atol=1e-5)]


def test_score_then_prune_with_their_defaults_build_fits_candidate(tiny_bert_dir, tmp_path, capsys):
    task_flags = ["--model", str(tiny_bert_dir), "--max-length", str(MAX_LENGTH), "--examples", str(EXAMPLES),
                  "--quiet"]
    scores_file = tmp_path / "scores.json"
    assert main(["score", *task_flags, "--out", str(scores_file)]) == 0
    assert main(["prune", *task_flags, "--scores", str(scores_file), "--remove", str(REMOVE),
                 "--out", str(tmp_path / "stepwise")]) == 0
    assert main(["prune", *task_flags, "--scores", str(scores_file), "--remove", str(REMOVE), "--no-compensate",
                 "--out", str(tmp_path / "outright")]) == 0
    capsys.readouterr()

    work = tmp_path / "fit-work"
    work.mkdir()
    task, teacher, fit_scores, builder = _fits_builder(tiny_bert_dir, work)
    written = json.loads(scores_file.read_text())
    assert written["criterion"] == fit_scores.criterion == "fluctuation"
    assert written["scores"] == fit_scores.to_dict()["scores"]  # raw, the same numbers fit ranks
    plan = json.loads((tmp_path / "stepwise" / "plan.json").read_text())
    assert plan["kept_heads"] == builder.facts.plan(REMOVE).kept_heads and plan["heads_removed"] == REMOVE

    fits = _encoder_state(builder.facts.pruned(Shape(REMOVE)).encoder)
    stepwise = _encoder_state(edgeprune.load(tmp_path / "stepwise"))
    outright = _encoder_state(edgeprune.load(tmp_path / "outright"))
    assert set(stepwise) == set(fits) == set(outright)
    for name, tensor in fits.items():
        torch.testing.assert_close(stepwise[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    differing = _differing(outright, fits)
    # compensation changes exactly the output-projection biases of the layers that lost heads
    assert differing and all(name.endswith("attention.output.dense.bias") for name in differing)
    assert len(differing) == sum(len(kept) < total for total, kept in zip(plan["num_heads"], plan["kept_heads"],
                                                                           strict=True))

    # the Python API: score_heads and prune with their defaults, on the same calibration inputs
    batches = input_batches(task, "calibration", 16, limit=EXAMPLES)
    api_scores = edgeprune.score_heads(teacher, batches)
    assert api_scores.criterion == "fluctuation" and not api_scores.normalized_per_layer
    api_plan = edgeprune.plan_heads("global-topk", api_scores, edgeprune.SelectionAmount(remove=REMOVE))
    assert api_plan.kept_heads == plan["kept_heads"]
    pruned = edgeprune.prune(copy.deepcopy(teacher), api_plan, batches).state_dict()
    fits_classifier = builder.facts.pruned(Shape(REMOVE)).state_dict()
    assert set(pruned) == set(fits_classifier)
    for name, tensor in fits_classifier.items():
        torch.testing.assert_close(pruned[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    outright_api = edgeprune.prune(copy.deepcopy(teacher), api_plan, compensate=False).state_dict()
    assert [name.removeprefix("encoder.") for name in _differing(outright_api, pruned)] == differing


def test_prune_compensation_without_data_is_a_clear_error(tiny_bert_dir):
    plan = edgeprune.PruningPlan([4, 4, 4], [[0, 1], [0, 1, 2, 3], [3]])
    with pytest.raises(edgeprune.UserInputError, match="pass batches"):
        edgeprune.prune(edgeprune.load(tiny_bert_dir), plan)
