"""Leave-one-out ablation: exact, and cheaper than one full forward per head."""

import numpy as np
import pytest
import torch

from edgeprune import prune_heads, score_heads
from edgeprune.importance import LeaveOneOut, classification_loss
from edgeprune.models import adapter_for
from tests._importance import HEADS, LAYERS, batches, classifier, silence_head
from tests.conftest import tiny_bert


def _naive(model, data, loss_fn=classification_loss):
    """One full forward per (batch, head): the definition, with nothing reused."""
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    width = max(b.num_heads for b in blocks)
    scores = np.full((LAYERS, HEADS), np.nan)
    with torch.no_grad():
        base = [float(loss_fn(model, b)) for b in data]
        sizes = [b["input_ids"].shape[0] for b in data]
        for block in blocks:
            for position, original in enumerate(block.original_heads):
                gates = torch.ones(len(blocks), width)
                gates[block.layer, position] = 0
                with adapter.gate_heads(model, gates):
                    diffs = [(float(loss_fn(model, b)) - b0) * n for b, b0, n in zip(data, base, sizes, strict=True)]
                scores[block.layer, original] = sum(diffs) / sum(sizes)
    return scores


@pytest.mark.parametrize("per_forward", [None, 1, 3])
def test_equals_naive_ablation_on_a_pruned_model_with_padding(per_forward):
    encoder = prune_heads(tiny_bert(initializer_range=0.2), {0: [1], 2: [0, 3]})
    model = classifier(encoder)
    data = batches()
    expected = _naive(model, data)
    scores = LeaveOneOut(per_forward).score(model, data, classification_loss)
    assert np.array_equal(np.isnan(scores.scores), np.isnan(expected)) and np.isnan(scores.scores[2, [0, 3]]).all()
    np.testing.assert_allclose(scores.scores, expected, rtol=1e-4, atol=1e-6)
    assert np.nanmax(np.abs(expected)) > 1e-2  # the ablations really move the loss


def test_a_head_that_writes_nothing_scores_zero():
    encoder = tiny_bert(initializer_range=0.2)
    silence_head(encoder, 1, 2)
    model = classifier(encoder).train()
    scores = score_heads(model, batches(), criterion="leave-one-out")
    assert abs(scores.scores[1, 2]) < 1e-6
    assert np.all(np.abs(np.delete(scores.scores.ravel(), 1 * HEADS + 2)) > 1e-4)
    assert model.training
    assert list(model.encoder.encoder.layer) == adapter_for(model).layer_modules(model)  # real layers put back


def _count_layer_work(model):
    """Per real layer module: how many forwards it ran and how many example rows they covered."""
    counts = {"calls": 0, "rows": 0}

    def count(_module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        counts["calls"] += 1
        counts["rows"] += hidden.shape[0]

    handles = [layer.register_forward_pre_hook(count, with_kwargs=True) for layer in model.encoder.encoder.layer]
    return counts, handles


@pytest.mark.parametrize("per_forward, calls, rows", [
    # per batch: one plain forward (3 layers), then for layer l one forward of layers l.. (3 - l layers)
    # with all 4 heads' ablations stacked: 3 + (3 + 2 + 1) calls, 4 × (3 + 4 × 6) rows
    (None, 3 * (3 + 6), 3 * 4 * (3 + 4 * 6)),
    # one ablation per forward: prefix reuse alone, 3 + 4 × 6 calls of 4 rows each
    (1, 3 * (3 + 4 * 6), 3 * 4 * (3 + 4 * 6)),
])
def test_runs_fewer_layer_forwards_than_naive_ablation(per_forward, calls, rows):
    model = classifier(tiny_bert())
    data = batches()
    counts, handles = _count_layer_work(model)
    _naive(model, data)
    naive = dict(counts)
    counts.update(calls=0, rows=0)
    LeaveOneOut(per_forward).score(model, data, classification_loss)
    for handle in handles:
        handle.remove()
    # naive: 3 batches × (1 + 12 ablations) full forwards of 3 layers × 4 rows
    assert naive == {"calls": 3 * 13 * 3, "rows": 3 * 13 * 3 * 4}
    assert counts == {"calls": calls, "rows": rows}
    assert counts["calls"] < naive["calls"] and counts["rows"] < naive["rows"]


class _LossInside(torch.nn.Module):
    """A model that returns its own already-averaged loss, like a Hugging Face model given labels."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask, labels):
        logits = self.inner(input_ids=input_ids, attention_mask=attention_mask)[0]
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def test_a_model_that_returns_a_reduced_loss_falls_back_to_one_ablation_per_forward():
    model = _LossInside(classifier(tiny_bert(initializer_range=0.2)))
    data = batches(count=2)

    def loss_fn(m, b):
        return m(**b)["loss"]

    expected = _naive(model, data, loss_fn)
    np.testing.assert_allclose(LeaveOneOut().score(model, data, loss_fn).scores, expected, rtol=1e-4, atol=1e-6)
