"""Every registered criterion: dense [layers, heads] shape, NaN for removed heads, state restored; JSON round trips."""

import json

import numpy as np
import pytest
import torch

import edgeprune
from edgeprune import HeadScores, LayerScores, prune_heads, score_heads, score_layers
from edgeprune.importance import CRITERIA, LAYER_CRITERIA, classification_loss
from tests._importance import HEADS, LAYERS, batches, classifier
from tests.conftest import tiny_bert

REMOVED = {0: [1], 2: [0, 3]}


def _removed_mask():
    mask = np.zeros((LAYERS, HEADS), dtype=bool)
    for layer, heads in REMOVED.items():
        mask[layer, heads] = True
    return mask


@pytest.mark.parametrize("name", CRITERIA.names())
def test_scores_are_dense_with_nan_exactly_for_removed_heads(name):
    model = classifier(prune_heads(tiny_bert(), REMOVED))
    scores = score_heads(model, batches(count=1), criterion=name)
    assert scores.criterion == name and scores.scores.shape == (LAYERS, HEADS)
    assert np.array_equal(np.isnan(scores.scores), _removed_mask())


@pytest.mark.parametrize("name", [n for n in CRITERIA.names() if n != "weight-magnitude"])
def test_a_failure_mid_scoring_leaves_no_hooks_and_restores_the_model(name):
    model = classifier(tiny_bert()).train()
    layers = list(model.encoder.encoder.layer)
    sentinel = torch.ones_like(layers[0].attention.output.dense.weight)
    layers[0].attention.output.dense.weight.grad = sentinel

    def loss_failing_in_a_replay(m, batch):  # leave-one-out fails here, with earlier layers swapped out
        if model.encoder.encoder.layer[0] is not layers[0]:
            raise RuntimeError("failed inside an ablation")
        return classification_loss(m, batch)

    # the others fail on the second batch, whose length exceeds the model's 64 positions
    data = batches(count=1) + batches(count=1, length=80)
    with pytest.raises(RuntimeError, match="inside an ablation" if name == "leave-one-out" else "expanded size"):
        score_heads(model, data, criterion=name, loss_fn=loss_failing_in_a_replay)
    assert model.training and all(p.requires_grad for p in model.parameters())
    assert layers[0].attention.output.dense.weight.grad is sentinel
    assert all(p.grad is None for p in model.parameters() if p is not layers[0].attention.output.dense.weight)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert list(model.encoder.encoder.layer) == layers


def test_score_heads_defaults_to_fits_first_candidate_and_score_layers_to_angular_distance():
    from edgeprune.search.options import FitOptions
    from edgeprune.search.scoring import CANDIDATES

    model = classifier(tiny_bert())
    assert FitOptions().criterion == "auto"  # fit measures; without data the API takes auto's default (its first)
    assert score_heads(model, batches(count=1)).criterion == CANDIDATES[0].criterion == "fluctuation"
    assert score_layers(model, batches(count=1)).criterion == "angular-distance"
    assert LAYER_CRITERIA.names() == ["angular-distance"]
    assert edgeprune.score_layers is score_layers and edgeprune.LayerScores is LayerScores


def test_head_and_layer_scores_round_trip_through_json():
    heads = score_heads(classifier(prune_heads(tiny_bert(), REMOVED)), batches(count=1), criterion="entropy")
    again = HeadScores.from_dict(json.loads(json.dumps(heads.to_dict())))
    np.testing.assert_array_equal(again.scores, heads.scores)  # NaN in the same places
    assert (again.criterion, again.num_examples, again.extra) == (heads.criterion, heads.num_examples, heads.extra)

    layers = score_layers(tiny_bert(), batches(count=1), block_size=2)
    layers.scores[1] = np.nan
    again = LayerScores.from_dict(json.loads(json.dumps(layers.to_dict())))
    np.testing.assert_array_equal(again.scores, layers.scores)
    assert (again.criterion, again.num_examples, again.block_size) == ("angular-distance", 4, 2)


def test_per_layer_normalizations_skip_removed_heads_and_unknown_ones_are_refused():
    raw = HeadScores(np.array([[1.0, 2.0, np.nan, 3.0], [4.0, 4.0, 4.0, 4.0]]), "x", 1)
    l2 = raw.normalize_per_layer()
    np.testing.assert_allclose(l2.scores[0, [0, 1, 3]], np.array([1, 2, 3]) / np.sqrt(14))
    zscore = raw.normalize_per_layer("zscore")
    np.testing.assert_allclose(zscore.scores[0, [0, 1, 3]], np.array([-1, 0, 1]) / np.sqrt(2 / 3))
    np.testing.assert_array_equal(zscore.scores[1], np.zeros(4))  # a constant layer: all equal, no division by 0
    assert np.isnan(zscore.scores[0, 2]) and zscore.normalized_per_layer
    unchanged = raw.normalize_per_layer("none")
    np.testing.assert_array_equal(unchanged.scores, raw.scores)
    assert not unchanged.normalized_per_layer and unchanged.scores is not raw.scores
    with pytest.raises(ValueError, match="l2, zscore, none"):
        raw.normalize_per_layer("minmax")
