"""Taylor criterion |∂L/∂o_h · o_h| (Molchanov et al., 2017) on head outputs."""

import numpy as np
import torch

from edgeprune import score_heads
from edgeprune.importance import classification_loss
from edgeprune.models import adapter_for
from tests._importance import HEADS, LAYERS, batches, classifier, silence_head
from tests.conftest import tiny_bert


def test_a_head_that_writes_nothing_scores_zero_and_state_is_restored():
    encoder = tiny_bert()
    silence_head(encoder, 1, 2)
    model = classifier(encoder).train()
    scores = score_heads(model, batches(), criterion="taylor")
    assert scores.scores.shape == (LAYERS, HEADS) and scores.criterion == "taylor" and scores.num_examples == 12
    assert scores.scores[1, 2] == 0.0
    assert np.all(np.delete(scores.scores.ravel(), 1 * HEADS + 2) > 0)
    assert model.training and all(p.requires_grad for p in model.parameters())
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in model.modules())


def test_equals_the_per_example_gate_gradient_computed_by_hand():
    # Σ ∂ℓ/∂o_h ⊙ o_h is ∂ℓ/∂ξ_h for a gate ξ_h = 1 on the head, so one example at a time:
    # importance = mean_i |∂ℓ_i/∂ξ_h|
    model = classifier(tiny_bert(initializer_range=0.2))
    data = batches()
    adapter = adapter_for(model)
    expected = torch.zeros(LAYERS, HEADS, dtype=torch.float64)
    count = 0
    for batch in data:
        for i in range(batch["input_ids"].shape[0]):
            example = {k: v[i:i + 1] for k, v in batch.items()}
            gates = torch.ones(LAYERS, HEADS, requires_grad=True)
            with adapter.gate_heads(model, gates):
                (grad,) = torch.autograd.grad(classification_loss(model, example), gates)
            expected += grad.abs().double()
            count += 1
    scores = score_heads(model, data, criterion="taylor")
    np.testing.assert_allclose(scores.scores, (expected / count).numpy(), rtol=1e-4, atol=1e-9)
    # the absolute value is taken per example, not per batch: never below the batch-level gate gradient
    gate_gradient = score_heads(model, data, criterion="gate-gradient").scores
    assert np.all(scores.scores >= gate_gradient - 1e-9) and np.any(scores.scores > gate_gradient * 1.01)
