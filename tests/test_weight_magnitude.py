"""Weight magnitude: the L2 (default) or L1 norm of the weights a head owns; no data needed."""

import numpy as np
import pytest
import torch

from edgeprune import score_heads
from edgeprune.models import adapter_for
from tests._importance import HEAD_SIZE, HEADS, LAYERS, classifier
from tests.conftest import tiny_bert


def _by_hand(encoder, layer, head, order):
    attention = encoder.encoder.layer[layer].attention
    rows = slice(head * HEAD_SIZE, (head + 1) * HEAD_SIZE)
    parts = [attention.self.query.weight[rows], attention.self.key.weight[rows], attention.self.value.weight[rows],
             attention.output.dense.weight[:, rows], attention.self.query.bias[rows], attention.self.key.bias[rows],
             attention.self.value.bias[rows]]
    flat = torch.cat([p.detach().reshape(-1).double() for p in parts])
    return float(flat.abs().sum()) if order == 1 else float(flat.pow(2).sum().sqrt())


@pytest.mark.parametrize("norm, order", [("l2", 2), ("l1", 1)])
def test_equals_the_norm_of_the_head_slices_and_reads_no_data(norm, order):
    encoder = tiny_bert()
    model = classifier(encoder)
    scores = score_heads(model, [], criterion="weight-magnitude", **({} if norm == "l2" else {"norm": norm}))
    assert scores.scores.shape == (LAYERS, HEADS) and scores.num_examples == 0 and scores.extra == {"norm": norm}
    expected = [[_by_hand(encoder, layer, head, order) for head in range(HEADS)] for layer in range(LAYERS)]
    np.testing.assert_allclose(scores.scores, expected, rtol=1e-6)


def test_a_head_whose_slices_are_zero_scores_zero():
    model = classifier(tiny_bert())
    with torch.no_grad():
        for view in adapter_for(model).head_weights(model, 1, 3):
            view.zero_()
    scores = score_heads(model, [], criterion="weight-magnitude").scores
    assert scores[1, 3] == 0.0 and np.all(np.delete(scores.ravel(), 1 * HEADS + 3) > 0)


def test_an_unknown_norm_is_refused():
    with pytest.raises(ValueError, match="norm must be one of"):
        score_heads(classifier(tiny_bert()), [], criterion="weight-magnitude", norm="l3")
