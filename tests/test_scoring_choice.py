"""The head scoring chosen by measurement (`criterion="auto"`): the decision is the best of its measurements, each
measurement is the PyTorch estimate fit's own builder makes for that ranking, the winner's becomes the search's
estimate, and `score`/`prune`/`fit` record and follow it. Fluctuation's `relative` form: its numerics against a
brute-force sum, and its equality with the projected form where every layer's input is unit-normalized."""

import copy
import json

import pytest
import torch

from edgeprune.cli import main
from edgeprune.devices import load_profile
from edgeprune.importance import ScoringChoice, score_heads
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.search.benchmarkers import this_machine
from edgeprune.search.builder import CandidateBuilder
from edgeprune.search.journal import Journal
from edgeprune.search.options import FitOptions
from edgeprune.search.scoring import (
    CANDIDATES,
    ScoringDecision,
    ScoringTrial,
    best_trial,
    journaled_head_scores,
    normalization,
    scoring_decision,
)
from edgeprune.search.shared import SharedWork, dense_head_means
from edgeprune.search.space import Shape
from edgeprune.serialization import from_jsonable, to_jsonable
from edgeprune.tasks import bundled_task
from edgeprune.tasks.base import Quality, batched_quality
from tests._byo import tiny_llama_dir
from tests._importance import batches, classifier

EXAMPLES, MAX_LENGTH = 32, 32


def _trial(value: float, higher_is_better: bool = True) -> ScoringTrial:
    return ScoringTrial("fluctuation", "none", True, Quality("accuracy", value, higher_is_better, "validation", 100),
                        1.0)


def test_a_later_candidate_must_beat_an_earlier_one_by_more_than_the_tolerance():
    assert best_trial([_trial(0.90), _trial(0.91)], tolerance=0.02) == 0  # within noise: the default stays
    assert best_trial([_trial(0.90), _trial(0.93)], tolerance=0.02) == 1
    assert best_trial([_trial(0.90), _trial(0.95), _trial(0.96)], tolerance=0.02) == 1
    assert best_trial([_trial(60.0, False), _trial(77.0, False)], tolerance=0.0) == 0  # perplexity: lower wins
    assert best_trial([_trial(77.0, False), _trial(60.0, False)], tolerance=0.0) == 1


def test_a_decision_round_trips_through_json_with_its_version():
    decision = ScoringDecision(6, 12, [_trial(0.9), _trial(0.8)], chosen=0, tolerance=0.01)
    data = json.loads(json.dumps(to_jsonable(decision)))
    assert data["version"] == 1 and from_jsonable(ScoringDecision, data) == decision
    assert decision.choice == ScoringChoice("fluctuation", "none", True)
    assert "head scoring chosen by measurement: fluctuation (none per layer, compensated)" in decision.describe()


@pytest.fixture(scope="module")
def auto_fit(tiny_bert_dir, tmp_path_factory):
    """fit's scoring on a tiny BERT with `criterion="auto"`, and a builder of the search on the winner."""
    work = tmp_path_factory.mktemp("auto-scoring")
    task = bundled_task("minilm-bbc", model_path=tiny_bert_dir, max_length=MAX_LENGTH,
                        progress=Progress(enabled=False))
    options = FitOptions(scoring_examples=EXAMPLES)
    teacher = task.teacher()
    shared = SharedWork()
    means = dense_head_means(teacher.model, task, options, shared)
    journal = Journal(work / "journal.jsonl", {}, resume=False)
    scores = journaled_head_scores(task, teacher.model, options, task.progress, journal, shared, teacher.validation,
                                   means)
    return task, teacher, options, means, journal, scores, work


def test_the_choice_is_the_best_of_the_builders_own_estimates_and_the_winners_is_the_searchs(auto_fit):
    task, teacher, options, means, journal, scores, work = auto_fit
    decision = scoring_decision(scores)
    assert [(t.criterion, t.normalize) for t in decision.trials] == [(c.criterion, c.normalize) for c in CANDIDATES]
    assert scores.criterion == decision.choice.criterion and normalization(scores, options) == decision.choice.normalize
    measured = []
    for trial in decision.trials:  # each figure is what fit's builder estimates for that ranking at the probe
        raw = score_heads(teacher.model, task.batches("calibration", options.scoring_batch_size, limit=EXAMPLES),
                          trial.criterion, loss_fn=task.loss)
        builder = CandidateBuilder(teacher.model, raw.normalize_per_layer(trial.normalize), task, options, work,
                                   task.progress, "executorch", load_profile("host"), this_machine(options),
                                   Journal(work / f"{trial.criterion}.jsonl", {}, resume=False), means=means)
        estimate = batched_quality(task, builder.facts.pruned(Shape(decision.heads_removed)), "validation")
        assert estimate.value == pytest.approx(trial.quality.value, abs=1e-9)
        measured.append(estimate.value)
    assert decision.chosen == best_trial(decision.trials, decision.tolerance)
    assert decision.heads_removed == 6 and decision.heads == 12  # 3 layers x 4 heads: half the 9 removable, step 3
    # the winner's measurement is journaled as the search's estimate of that structure: not measured again
    assert journal.proxies[Shape(decision.heads_removed).key]["value"] == measured[decision.chosen]


def test_a_named_criterion_is_not_chosen_and_keeps_raw_scores(auto_fit, tmp_path):
    task, teacher, _, _, _, _, _ = auto_fit
    options = FitOptions(criterion="taylor", scoring_examples=EXAMPLES)
    journal = Journal(tmp_path / "journal.jsonl", {}, resume=False)
    scores = journaled_head_scores(task, teacher.model, options, task.progress, journal)
    assert scores.criterion == "taylor" and scoring_decision(scores) is None and not journal.proxies
    assert normalization(scores, options) == "none"
    assert normalization(scores, FitOptions(normalize="zscore")) == "zscore"


def test_score_records_the_choice_and_prune_follows_its_normalization(tiny_bert_dir, tmp_path, capsys):
    flags = ["--model", str(tiny_bert_dir), "--max-length", str(MAX_LENGTH), "--examples", str(EXAMPLES), "--quiet"]
    assert main(["score", *flags, "--out", str(tmp_path / "auto.json"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    decision = from_jsonable(ScoringDecision, summary["scoring_decision"])
    assert summary["criterion"] == decision.choice.criterion and summary["normalize"] == decision.choice.normalize
    assert main(["score", *flags, "--criterion", "taylor", "--out", str(tmp_path / "taylor.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scoring_decision"] is None
    assert main(["fit", "--criterion", "bogus"]) == 2
    assert "'bogus' is not one of 'auto'" in capsys.readouterr().err


def test_relative_fluctuation_is_the_per_token_loss_over_the_layer_inputs_mean_square(tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir(tmp_path / "llama")).eval()
    with torch.no_grad():  # a residual stream whose scale differs from token to token and layer to layer
        model.model.embed_tokens.weight.mul_(torch.linspace(0.2, 5.0, model.config.vocab_size)[:, None])
    data = [{"input_ids": b["input_ids"], "attention_mask": torch.ones_like(b["input_ids"])}
            for b in batches(2, padded=False)]
    scores = score_heads(model, data, "fluctuation", form="relative").scores

    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    outputs = {b.layer: [] for b in blocks}
    inputs = {b.layer: [] for b in blocks}
    handles = [layer.register_forward_pre_hook(lambda _m, args, index=index: inputs[index].append(args[0]))
               for index, layer in enumerate(adapter.layer_modules(model))]
    with torch.no_grad(), adapter.head_output_hook(model, lambda layer, heads: outputs[layer].append(heads) or heads):
        for batch in data:
            model(**batch)
    for handle in handles:
        handle.remove()
    for block in blocks:
        x = torch.cat(outputs[block.layer]).double().flatten(0, 1)  # [tokens, heads, head size]
        weight = 1 / torch.cat(inputs[block.layer]).double().flatten(0, 1).pow(2).mean(-1)
        w_o = adapter.output_projection(model, block.layer).weight.double().unflatten(1, (block.num_heads, -1))
        for head in range(block.num_heads):
            projected = (x[:, head] - x[:, head].mean(0)) @ w_o[:, head].T  # [tokens, hidden]
            expected = (weight * projected.pow(2).sum(-1)).mean()
            assert scores[block.layer, head] == pytest.approx(float(expected), rel=1e-6)


def test_relative_equals_projected_where_every_layer_input_is_unit_normalized():
    model = classifier()  # a fresh BERT: post-LN, LayerNorms unscaled, so each token's layer input has mean square 1
    relative = score_heads(model, batches(), "fluctuation", form="relative").scores
    projected = score_heads(copy.deepcopy(model), batches(), "fluctuation", form="projected").scores
    assert relative == pytest.approx(projected, rel=1e-3)
