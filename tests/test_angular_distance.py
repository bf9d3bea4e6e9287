"""Layer angular distance arccos(cos(x_in, x_out)) / π (Gromov et al., 2024), per layer and per block."""

import numpy as np
import pytest
import torch

from edgeprune import LayerScores, score_layers
from tests._importance import LAYERS, batches
from tests.conftest import tiny_bert


def _pass_through(encoder, layer):
    """Zero the attention and FFN outputs: the layer returns LayerNorm(LayerNorm(x)), and x already comes out
    of a LayerNorm with unit gain and zero bias, so the output equals the input up to float rounding."""
    module = encoder.encoder.layer[layer]
    with torch.no_grad():
        for linear in (module.attention.output.dense, module.output.dense):
            linear.weight.zero_()
            linear.bias.zero_()


def _by_hand(encoder, data, block):
    """From the encoder's own hidden states: hidden_states[l] enters layer l, hidden_states[l + 1] leaves it."""
    total = np.zeros(LAYERS - block + 1)
    for batch in data:
        with torch.no_grad():
            states = encoder(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                             output_hidden_states=True).hidden_states
        for start in range(len(total)):
            x, y = states[start].double(), states[start + block].double()
            cos = (x * y).sum(-1) / (x.norm(dim=-1) * y.norm(dim=-1))
            angle = torch.arccos(cos.clamp(-1, 1)) / np.pi
            for i, mask in enumerate(batch["attention_mask"]):
                total[start] += angle[i][mask.bool()].mean().item()
    return total / sum(b["input_ids"].shape[0] for b in data)


@pytest.mark.parametrize("block", [1, 2, 3])
def test_equals_the_distance_between_the_encoders_hidden_states(block):
    encoder = tiny_bert(initializer_range=0.2)
    data = batches()
    scores = score_layers(encoder, data, block_size=block)
    assert isinstance(scores, LayerScores) and scores.scores.shape == (LAYERS - block + 1,)
    assert scores.block_size == block and scores.num_examples == 12 and scores.criterion == "angular-distance"
    np.testing.assert_allclose(scores.scores, _by_hand(encoder, data, block), rtol=1e-6)


def test_a_layer_that_passes_its_input_through_scores_zero():
    encoder = tiny_bert(initializer_range=0.2)
    _pass_through(encoder, 1)
    scores = score_layers(encoder, batches())
    assert scores.scores[1] < 1e-5 and np.all(scores.scores[[0, 2]] > 0.05)
    # a block ending in the pass-through layer is as far as its first layer alone
    blocks = score_layers(encoder, batches(), block_size=2)
    assert blocks.scores[0] == pytest.approx(scores.scores[0], abs=1e-5)


def test_padding_is_excluded():
    encoder = tiny_bert(initializer_range=0.2)
    data = batches()
    changed = [{**b, "input_ids": torch.where(b["attention_mask"] == 0, 4242, b["input_ids"])} for b in data]
    np.testing.assert_allclose(score_layers(encoder, changed).scores, score_layers(encoder, data).scores, rtol=1e-9)


def test_a_block_longer_than_the_model_is_refused():
    with pytest.raises(ValueError, match="exceeds"):
        score_layers(tiny_bert(), batches(count=1), block_size=4)


def test_a_failing_forward_leaves_no_hooks_and_restores_training_mode():
    encoder = tiny_bert().train()
    with pytest.raises(RuntimeError, match="expanded size"):  # a length beyond the model's 64 positions
        score_layers(encoder, batches(count=1) + batches(count=1, length=80))
    assert encoder.training and all(not m._forward_hooks and not m._forward_pre_hooks for m in encoder.modules())
