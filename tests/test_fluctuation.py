"""Fluctuation (FLAP): projected form = E‖W_O^(h)(x_h − x̄_h)‖², flap form = Σ_j Var(x_j)‖W_O[:, j]‖², over real
tokens; a head whose output is constant scores zero however large its output."""

import numpy as np
import pytest
import torch

from edgeprune import score_heads
from edgeprune.importance import Fluctuation
from tests._importance import HEAD_SIZE, HEADS, LAYERS, batches, classifier
from tests.conftest import tiny_bert


def _by_hand(model, data, form):
    """Moments of each head's real-token outputs, gathered from captured contexts across all batches."""
    layers = model.encoder.encoder.layer
    contexts = {layer: [] for layer in range(LAYERS)}
    for batch in data:
        real = batch["attention_mask"].bool()
        handles = [layer.attention.output.dense.register_forward_pre_hook(
            lambda _m, args, i=i, real=real: contexts[i].append(args[0][real]))
            for i, layer in enumerate(layers)]
        with torch.no_grad():
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        for handle in handles:
            handle.remove()
    expected = np.zeros((LAYERS, HEADS))
    for layer in range(LAYERS):
        tokens = torch.cat(contexts[layer]).double()  # [real tokens, heads * head size]
        weight = layers[layer].attention.output.dense.weight.double()
        for head in range(HEADS):
            cols = slice(head * HEAD_SIZE, (head + 1) * HEAD_SIZE)
            centred = tokens[:, cols] - tokens[:, cols].mean(dim=0)
            if form == "projected":
                expected[layer, head] = (centred @ weight[:, cols].T).pow(2).sum(dim=-1).mean().item()
            else:
                variance = centred.pow(2).mean(dim=0)
                expected[layer, head] = (variance * weight[:, cols].pow(2).sum(dim=0)).sum().item()
    return expected


@pytest.mark.parametrize("form", ["projected", "flap"])
def test_equals_a_hand_computation_over_real_tokens(form):
    model = classifier(tiny_bert(initializer_range=0.2))
    data = batches()
    scores = Fluctuation(form).score(model, data)
    assert scores.criterion == "fluctuation" and scores.extra == {"form": form}
    np.testing.assert_allclose(scores.scores, _by_hand(model, data, form), rtol=1e-6)


def test_the_projected_form_counts_covariance_between_channels_and_flap_does_not():
    model = classifier(tiny_bert(initializer_range=0.2))
    projected, flap = (score_heads(model, batches(), "fluctuation", form=f).scores for f in ("projected", "flap"))
    assert np.all(projected > 0) and np.all(flap > 0)
    assert not np.allclose(projected, flap, rtol=1e-3)


def test_a_head_with_constant_output_scores_zero():
    encoder = tiny_bert(initializer_range=0.2)
    value = encoder.encoder.layer[1].attention.self.value
    with torch.no_grad():  # values independent of the token: the head outputs its bias, a constant vector
        value.weight[2 * HEAD_SIZE:3 * HEAD_SIZE] = 0
        value.bias[2 * HEAD_SIZE:3 * HEAD_SIZE] = 1.5
    for form in ("projected", "flap", "relative"):
        scores = Fluctuation(form).score(classifier(encoder), batches()).scores
        assert abs(scores[1, 2]) < 1e-9 and np.all(np.delete(scores.ravel(), HEADS + 2) > 1e-6)


def test_the_default_form_is_relative():
    assert Fluctuation().form == "relative"
    assert score_heads(classifier(), batches(), "fluctuation").extra == {"form": "relative"}


def test_an_unknown_form_is_refused():
    with pytest.raises(ValueError, match="projected, flap, relative"):
        Fluctuation("variance")
