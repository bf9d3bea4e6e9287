"""Bias compensation: structural removal with the removed heads' means folded into the output bias equals the
dense model with those heads' outputs replaced by their means, in every family; means are token-weighted over
real tokens; the bias a family cannot declare in its config survives save/load."""

import copy

import numpy as np
import pytest
import torch

import edgeprune
from edgeprune import prune_heads
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.llama import OUTPUT_BIAS_CONFIG_KEY
from edgeprune.pruning import HeadOutputMeans, PruningPlan, apply_plan, measure_head_means
from tests.conftest import tiny_bert
from tests.test_distilbert_adapter import tiny_distilbert
from tests.test_family_costs import tiny_roberta
from tests.test_llama_adapter import tiny
from tests.test_mha_adapter import encoder
from tests.test_vit_adapter import tiny_vit

REMOVE = {0: [1, 3], 2: [0, 1, 2]}
GQA_REMOVE = {0: [2, 3], 1: [1, 3]}  # a whole KV group, then one query head from each group


def text_batches(vocab, count=2, size=3, length=10, seed=4):
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        ids = torch.randint(3, vocab, (size, length), generator=generator)
        mask = torch.ones_like(ids)
        mask[1, 6:] = 0
        batches.append({"input_ids": ids, "attention_mask": mask})
    return batches


def _pixel_batches(count=2):
    generator = torch.Generator().manual_seed(4)
    return [{"pixel_values": torch.randn(2, 3, 16, 16, generator=generator)} for _ in range(count)]


def _mha_batches(count=2):
    generator = torch.Generator().manual_seed(4)
    batches = []
    for _ in range(count):
        padding = torch.zeros(3, 7, dtype=torch.bool)
        padding[1, 5:] = True
        batches.append({"src": torch.randn(3, 7, 16, generator=generator), "src_key_padding_mask": padding})
    return batches


FAMILIES = {
    "bert": (tiny_bert, lambda: text_batches(30522), REMOVE),
    "roberta": (tiny_roberta, lambda: text_batches(300), REMOVE),
    "distilbert": (tiny_distilbert, lambda: text_batches(500), REMOVE),
    "vit": (tiny_vit, _pixel_batches, REMOVE),
    "llama": (lambda: tiny("llama"), lambda: text_batches(128), GQA_REMOVE),
    "qwen2": (lambda: tiny("qwen2"), lambda: text_batches(128), GQA_REMOVE),
    "mha": (encoder, _mha_batches, REMOVE),
}


def _output(model, batch):
    with torch.no_grad():
        output = model(**batch)
    if isinstance(output, torch.Tensor):
        return output
    return output.logits if hasattr(output, "logits") else output.last_hidden_state


def _mean_ablated(model, means, remove, batch):
    """The dense model's output with each removed head's output replaced by its measured mean."""
    def replace(layer, context):
        if layer not in remove:
            return context
        context = context.clone()
        for head in remove[layer]:
            context[:, :, head] = torch.as_tensor(means.means[layer][head], dtype=context.dtype)
        return context

    with adapter_for(model).head_output_hook(model, replace):
        return _output(model, batch)


@pytest.mark.parametrize("family", FAMILIES)
def test_compensated_removal_equals_replacing_the_heads_by_their_means(family):
    build, make_batches, remove = FAMILIES[family]
    model, batches = build(), make_batches()
    means = measure_head_means(model, batches)
    expected = _mean_ablated(model, means, remove, batches[0])
    zeroed = prune_heads(copy.deepcopy(model), remove)
    compensated = prune_heads(copy.deepcopy(model), remove, compensate=means)
    torch.testing.assert_close(_output(compensated, batches[0]), expected, atol=1e-5, rtol=1e-5)
    # the compensation changes the result (the heads' means are not zero) ...
    assert not torch.allclose(_output(zeroed, batches[0]), expected, atol=1e-4)
    # ... and batches given directly are measured the same way
    measured_here = prune_heads(copy.deepcopy(model), remove, compensate=batches)
    torch.testing.assert_close(_output(measured_here, batches[0]), expected, atol=1e-5, rtol=1e-5)
    dense_heads = [b.num_heads for b in adapter_for(model).attention_blocks(model)]
    kept = [[h for h in range(n) if h not in remove.get(layer, [])] for layer, n in enumerate(dense_heads)]
    through_plan = apply_plan(copy.deepcopy(model), PruningPlan(dense_heads, kept), compensation=means)
    torch.testing.assert_close(_output(through_plan, batches[0]), expected, atol=1e-5, rtol=1e-5)


def test_means_are_token_weighted_over_real_tokens_only():
    model = tiny_bert()
    batches = text_batches(30522)
    contexts = []
    dense = model.encoder.layer[1].attention.output.dense
    handle = dense.register_forward_pre_hook(lambda _m, args: contexts.append(args[0]))
    for batch in batches:
        _output(model, batch)
    handle.remove()
    real = torch.cat([c[b["attention_mask"].bool()] for c, b in zip(contexts, batches, strict=True)])
    expected = real.double().mean(dim=0).view(4, 8).numpy()
    means = measure_head_means(model, batches)
    np.testing.assert_allclose(means.means[1], expected, rtol=1e-6, atol=1e-7)
    assert means.num_tokens == int(sum(b["attention_mask"].sum() for b in batches))


def test_means_round_trip_json_and_record_removed_heads_as_missing():
    model = prune_heads(tiny_bert(), {0: [2]})
    means = measure_head_means(model, text_batches(30522, count=1))
    assert np.isnan(means.means[0][2]).all() and not np.isnan(means.means[0][[0, 1, 3]]).any()
    restored = HeadOutputMeans.from_dict(means.to_dict())
    for a, b in zip(means.means, restored.means, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(UserInputError, match="no measured mean for heads"):
        prune_heads(prune_heads(tiny_bert(), {0: [2]}), {0: [1]}, compensate=HeadOutputMeans(
            [np.full((4, 8), np.nan)] * 3, 10))


def test_a_single_batch_or_no_data_is_refused_with_a_clear_message():
    model = tiny_bert()
    batch = text_batches(30522, count=1)[0]
    with pytest.raises(UserInputError, match="wrap one batch in a list"):
        prune_heads(model, {0: [1]}, compensate=batch)
    with pytest.raises(UserInputError, match="batches were empty"):
        prune_heads(model, {0: [1]}, compensate=[])
    assert adapter_for(model).attention_blocks(model)[0].num_heads == 4  # nothing was removed


def test_llama_output_bias_is_recorded_in_the_config_and_survives_save_and_load(tmp_path):
    model = tiny("llama")
    batches = text_batches(128)
    assert model.model.layers[0].self_attn.o_proj.bias is None
    prune_heads(model, GQA_REMOVE, compensate=batches)
    assert model.model.layers[0].self_attn.o_proj.bias is not None
    assert getattr(model.config, OUTPUT_BIAS_CONFIG_KEY) == [0, 1]
    restored = edgeprune.load(edgeprune.save(model, tmp_path / "pruned"))
    torch.testing.assert_close(_output(restored, batches[0]), _output(model, batches[0]))
    adapter_for(model).remove_layers(model, [0])  # the record follows the layers
    assert getattr(model.config, OUTPUT_BIAS_CONFIG_KEY) == [0]
