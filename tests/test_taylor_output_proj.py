"""Taylor criterion on the output-projection columns, ‖∂L/∂W_O^(h) ⊙ W_O^(h)‖_F (Molchanov et al., 2019)."""

import numpy as np
import torch

from edgeprune import score_heads
from edgeprune.importance import classification_loss
from tests._importance import HEAD_SIZE, HEADS, LAYERS, batches, classifier, silence_head
from tests.conftest import tiny_bert


def test_a_head_with_zero_output_columns_scores_zero():
    encoder = tiny_bert()
    silence_head(encoder, 0, 3)
    scores = score_heads(classifier(encoder), batches(), criterion="taylor-output-proj")
    assert scores.scores.shape == (LAYERS, HEADS) and scores.num_examples == 12
    assert scores.scores[0, 3] == 0.0
    assert np.all(np.delete(scores.scores.ravel(), 3) > 0)


def test_equals_the_gradient_of_the_mean_loss_times_the_weights_and_keeps_existing_grads():
    model = classifier(tiny_bert(initializer_range=0.2))
    data = batches()
    dense = [layer.attention.output.dense.weight for layer in model.encoder.encoder.layer]
    sentinel = torch.full_like(dense[1], 7.0)
    dense[1].grad = sentinel

    reference = [torch.nn.Parameter(w.detach().clone()) for w in dense]
    expected = np.zeros((LAYERS, HEADS))
    with torch.no_grad():
        originals = [w.clone() for w in dense]
    # mean loss over all 12 examples, differentiated with respect to each layer's output projection
    for layer, module in enumerate(model.encoder.encoder.layer):
        module.attention.output.dense.weight = reference[layer]
    total = sum(classification_loss(model, b) * b["input_ids"].shape[0] for b in data) / 12
    grads = torch.autograd.grad(total, reference)
    for layer, module in enumerate(model.encoder.encoder.layer):
        module.attention.output.dense.weight = dense[layer]
        for head in range(HEADS):
            cols = slice(head * HEAD_SIZE, (head + 1) * HEAD_SIZE)
            expected[layer, head] = torch.linalg.matrix_norm(grads[layer][:, cols] * originals[layer][:, cols])

    scores = score_heads(model, data, criterion="taylor-output-proj")
    np.testing.assert_allclose(scores.scores, expected, rtol=1e-4)
    assert dense[1].grad is sentinel and dense[0].grad is None
    assert all(p.requires_grad for p in model.parameters())
