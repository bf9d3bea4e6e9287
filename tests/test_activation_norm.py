"""Activation norm of each head's output, projected (default) or before the output projection."""

import numpy as np
import torch

from edgeprune import score_heads
from edgeprune.importance import ActivationNorm
from tests._importance import HEAD_SIZE, HEADS, LAYERS, batches, classifier, silence_head
from tests.conftest import tiny_bert


def test_a_head_with_zero_output_columns_scores_zero_once_projected():
    encoder = tiny_bert()
    silence_head(encoder, 2, 1)
    model = classifier(encoder)
    projected = score_heads(model, batches(), criterion="activation-norm")
    assert projected.scores.shape == (LAYERS, HEADS) and projected.extra == {"projected": True}
    assert projected.scores[2, 1] == 0.0 and np.all(np.delete(projected.scores.ravel(), 2 * HEADS + 1) > 0)
    # before the projection the head is still active: that is what the projected default is for
    raw = ActivationNorm(projected=False).score(model, batches())
    assert np.all(raw.scores > 0)
    with torch.no_grad():  # zero values: now the head's output itself is zero
        value = encoder.encoder.layer[2].attention.self.value
        value.weight[HEAD_SIZE:2 * HEAD_SIZE] = 0
        value.bias[HEAD_SIZE:2 * HEAD_SIZE] = 0
    assert ActivationNorm(projected=False).score(model, batches()).scores[2, 1] == 0.0


def _by_hand(model, data, projected):
    """Per token norm, mean over each example's real tokens, mean over examples, from captured contexts."""
    layers = model.encoder.encoder.layer
    expected = np.zeros((LAYERS, HEADS))
    for batch in data:
        contexts = {}
        handles = [layer.attention.output.dense.register_forward_pre_hook(
            lambda _m, args, i=i, store=contexts: store.__setitem__(i, args[0])) for i, layer in enumerate(layers)]
        with torch.no_grad():
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        for handle in handles:
            handle.remove()
        for layer, context in contexts.items():
            weight = layers[layer].attention.output.dense.weight
            for head in range(HEADS):
                cols = slice(head * HEAD_SIZE, (head + 1) * HEAD_SIZE)
                out = context[..., cols] @ weight[:, cols].T if projected else context[..., cols]
                for i, mask in enumerate(batch["attention_mask"]):
                    expected[layer, head] += out[i][mask.bool()].norm(dim=-1).mean().item()
    return expected / sum(b["input_ids"].shape[0] for b in data)


def test_equals_a_hand_computation_over_real_tokens():
    model = classifier(tiny_bert(initializer_range=0.2))
    data = batches()
    for projected in (True, False):
        scores = ActivationNorm(projected).score(model, data)
        np.testing.assert_allclose(scores.scores, _by_hand(model, data, projected), rtol=1e-5)
