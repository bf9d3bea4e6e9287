"""Combination: a weighted sum of per-criterion normalized scores."""

import numpy as np
import pytest

from edgeprune import score_heads
from edgeprune.importance import Combination, classification_loss
from edgeprune.importance.combination import DEFAULT_WEIGHTS
from tests._importance import batches, classifier
from tests.conftest import tiny_bert


def _layer_l2(scores):
    return scores / np.linalg.norm(scores, axis=1, keepdims=True)


def _minmax(scores):
    return (scores - scores.min()) / (scores.max() - scores.min())


@pytest.mark.parametrize("normalization, normalize", [("layer-l2", _layer_l2), ("minmax", _minmax)])
def test_equals_the_weighted_sum_of_normalized_components(normalization, normalize):
    model = classifier(tiny_bert(initializer_range=0.2))
    data = batches()
    taylor = score_heads(model, data, criterion="taylor").scores
    focus = score_heads(model, data, criterion="entropy").scores
    # a one-pass iterator: every component must still see all the batches
    combined = Combination({"taylor": 0.3, "entropy": 0.7}, normalization).score(model, iter(data),
                                                                                 classification_loss)
    np.testing.assert_allclose(combined.scores, 0.3 * normalize(taylor) + 0.7 * normalize(focus), rtol=1e-6)
    assert combined.num_examples == 12 and combined.extra["weights"] == {"taylor": 0.3, "entropy": 0.7}
    # each component matters: it is neither one of them alone
    assert not np.allclose(combined.scores, normalize(taylor)) and not np.allclose(combined.scores, normalize(focus))


def test_the_registered_default_uses_the_default_weights():
    model = classifier(tiny_bert(initializer_range=0.2))
    data = batches(count=1)
    expected = sum(weight * _layer_l2(score_heads(model, data, criterion=name).scores)
                   for name, weight in DEFAULT_WEIGHTS.items())
    np.testing.assert_allclose(score_heads(model, data, criterion="combination").scores, expected, rtol=1e-6)


@pytest.mark.parametrize("weights, message", [({}, "at least one"), ({"combination": 1.0}, "cannot combine"),
                                              ({"nope": 1.0}, "cannot combine"),
                                              ({"taylor": float("nan")}, "finite")])
def test_bad_weights_are_refused(weights, message):
    with pytest.raises(ValueError, match=message):
        Combination(weights)
