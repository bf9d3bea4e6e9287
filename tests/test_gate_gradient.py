"""Gate-gradient criterion (Michel et al., 2019)."""

import numpy as np
import torch

from edgeprune import prune_heads, score_heads
from edgeprune.models.classifier import EncoderClassifier
from tests.conftest import tiny_bert


def _classifier(encoder):
    torch.manual_seed(3)
    return EncoderClassifier(encoder, torch.nn.Linear(32, 3)).eval()


def _batches():
    generator = torch.Generator().manual_seed(5)
    for _ in range(3):
        ids = torch.randint(1000, 30522, (4, 12), generator=generator)
        yield {"input_ids": ids, "attention_mask": torch.ones_like(ids),
               "labels": torch.randint(0, 3, (4,), generator=generator)}


def test_scores_are_per_layer_and_head_and_zero_for_a_head_with_no_effect():
    encoder = tiny_bert()
    with torch.no_grad():  # head 2 of layer 1 writes nothing: its output-projection columns are zero
        encoder.encoder.layer[1].attention.output.dense.weight[:, 16:24] = 0
    scores = score_heads(_classifier(encoder), list(_batches()), criterion="gate-gradient")
    assert scores.scores.shape == (3, 4) and scores.criterion == "gate-gradient" and scores.num_examples == 12
    assert scores.scores[1, 2] == 0.0
    assert np.all(np.delete(scores.scores.ravel(), 1 * 4 + 2) > 0)
    assert all(p.requires_grad for p in encoder.parameters())  # flags restored


def test_removed_heads_score_nan_and_the_rest_keep_their_dense_index():
    encoder = prune_heads(tiny_bert(), {0: [1]})
    scores = score_heads(_classifier(encoder), list(_batches()), criterion="gate-gradient")
    assert np.isnan(scores.scores[0, 1]) and not np.isnan(scores.scores[0, [0, 2, 3]]).any()


def test_per_layer_normalization_gives_unit_norm_rows_and_round_trips():
    scores = score_heads(_classifier(tiny_bert()), list(_batches()), "gate-gradient").normalize_per_layer()
    np.testing.assert_allclose(np.linalg.norm(scores.scores, axis=1), 1.0)
    again = type(scores).from_dict(scores.to_dict())
    np.testing.assert_array_equal(again.scores, scores.scores)
    assert again.normalized_per_layer
