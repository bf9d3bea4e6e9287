"""Attention focus log(n_keys) − entropy (Clark et al., 2019; Voita et al., 2019)."""

import numpy as np
import torch

from edgeprune import score_heads
from edgeprune.models import adapter_for
from tests._importance import HEAD_SIZE, HEADS, LAYERS, batches, classifier
from tests.conftest import tiny_bert


def _unlabelled(data):
    return [{k: v for k, v in b.items() if k != "labels"} for b in data]


def _uniform_and_peaked(encoder, layer=1, uniform=0, peaked=1):
    """Head `uniform` gets zero queries (equal scores for every key); head `peaked` gets W_Q = W_K with
    large entries, so each token's query matches its own key far better than any other."""
    attention = encoder.encoder.layer[layer].attention.self
    rows = [slice(h * HEAD_SIZE, (h + 1) * HEAD_SIZE) for h in range(HEADS)]
    generator = torch.Generator().manual_seed(11)
    with torch.no_grad():
        attention.query.weight[rows[uniform]] = 0
        attention.query.bias[rows[uniform]] = 0
        shared = torch.randn(HEAD_SIZE, 32, generator=generator)
        attention.query.weight[rows[peaked]] = shared
        attention.key.weight[rows[peaked]] = shared
        attention.query.bias[rows[peaked]] = 0
        attention.key.bias[rows[peaked]] = 0


def test_uniform_attention_scores_zero_and_peaked_attention_scores_high_without_labels():
    encoder = tiny_bert()
    _uniform_and_peaked(encoder)
    data = _unlabelled(batches())
    scores = score_heads(classifier(encoder), data, criterion="entropy")
    assert scores.scores.shape == (LAYERS, HEADS) and scores.num_examples == 12
    # uniform over the real keys only: 0 exactly when padding keys are left out of n
    assert abs(scores.scores[1, 0]) < 1e-6
    shortest = min(int(m.sum()) for b in data for m in b["attention_mask"])
    assert scores.scores[1, 1] > 0.5 * np.log(shortest)
    assert scores.scores[1, 1] > np.delete(scores.scores.ravel(), 1 * HEADS + 1).max()


def test_equals_a_hand_computation_from_the_attention_probabilities():
    model = classifier(tiny_bert(initializer_range=0.2))
    data = batches(count=2)
    captured = {}
    adapter = adapter_for(model)
    expected = np.zeros((LAYERS, HEADS))
    for batch in data:
        with torch.no_grad(), adapter.attention_probs_hook(model, lambda layer, p: captured.__setitem__(layer, p)):
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        for layer, probs in captured.items():
            for i, mask in enumerate(batch["attention_mask"]):
                n = int(mask.sum())
                p = probs[i, :, :n, :n].double()  # real tokens come first in these batches
                entropy = -(p * p.clamp(min=1e-300).log()).sum(-1)  # [heads, queries]
                expected[layer] += (np.log(n) - entropy).mean(-1).numpy()
    expected /= 8
    np.testing.assert_allclose(score_heads(model, data, criterion="entropy").scores, expected, rtol=1e-6, atol=1e-9)


def test_padding_tokens_do_not_change_the_scores():
    model = classifier(tiny_bert(initializer_range=0.2))
    data = batches()
    changed = []
    generator = torch.Generator().manual_seed(2)
    for batch in data:
        ids = batch["input_ids"].clone()
        padding = batch["attention_mask"] == 0
        ids[padding] = torch.randint(1000, 30522, (int(padding.sum()),), generator=generator)
        changed.append({**batch, "input_ids": ids})
    before = score_heads(model, data, criterion="entropy").scores
    after = score_heads(model, changed, criterion="entropy").scores
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-9)
    # not vacuous: the padded positions' own attention rows do change with their ids
    rows = []
    adapter = adapter_for(model)
    for batch in (data[0], changed[0]):
        with torch.no_grad(), adapter.attention_probs_hook(model, lambda layer, p: rows.append(p[0, :, -1]) if
                                                           layer == 1 else None):
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    assert not torch.allclose(rows[0], rows[1], atol=1e-4)
