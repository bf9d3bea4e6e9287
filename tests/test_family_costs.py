"""Every encoder family: FLOPs after a plan are exactly what the plan predicts; RoBERTa goes through the
BERT adapter with the same equivalence as BERT."""

import copy

import pytest
import torch

from edgeprune import PruningPlan, apply_plan, prune_heads
from edgeprune.models import adapter_for
from edgeprune.models.bert import BertAdapter
from edgeprune.pruning import measure_flops, predicted_flops, predicted_parameter_count
from tests.conftest import tiny_bert
from tests.test_distilbert_adapter import tiny_distilbert
from tests.test_vit_adapter import tiny_vit

PLAN = PruningPlan([4, 4, 4], [[0, 2], [1, 2, 3], [3]])


def _text_inputs(vocab):
    ids = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(3))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def tiny_roberta():
    from transformers import RobertaConfig, RobertaModel

    torch.manual_seed(0)
    config = RobertaConfig(vocab_size=300, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=40, attn_implementation="eager")
    return RobertaModel(config).eval()


FAMILIES = {
    "bert": (tiny_bert, lambda: _text_inputs(30522)),
    "roberta": (tiny_roberta, lambda: _text_inputs(300)),
    "distilbert": (tiny_distilbert, lambda: _text_inputs(500)),
    "vit": (tiny_vit, lambda: {"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))}),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_flops_and_parameters_after_the_plan_are_exactly_predicted(family):
    build, inputs = FAMILIES[family]
    model, data = build(), inputs()
    flops, params = predicted_flops(model, PLAN, data), predicted_parameter_count(model, PLAN)
    assert flops < measure_flops(model, data)
    pruned = apply_plan(copy.deepcopy(model), PLAN)
    assert measure_flops(pruned, data) == flops
    assert sum(p.numel() for p in pruned.parameters()) == params


def test_roberta_uses_the_bert_adapter_and_removal_equals_gating():
    model = tiny_roberta()
    adapter = adapter_for(model)
    assert isinstance(adapter, BertAdapter)
    data = _text_inputs(300)
    gates = torch.ones(3, 4)
    gates[0, [1, 3]] = 0
    with torch.no_grad(), adapter.gate_heads(model, gates):
        expected = model(**data).last_hidden_state
    pruned = prune_heads(copy.deepcopy(model), {0: [1, 3]})
    with torch.no_grad():
        torch.testing.assert_close(pruned(**data).last_hidden_state, expected, atol=1e-5, rtol=1e-5)


def _gqa_plans():
    """Per layer of a 2-layer, 4-query-head, 2-KV-head decoder (groups [0, 1] and [2, 3])."""
    return {
        "whole-group": PruningPlan([4, 4], [[0, 1], [2, 3]]),
        "per-group": PruningPlan([4, 4], [[0, 2], [1, 3]]),
        "group-and-per-group": PruningPlan([4, 4], [[1], [0, 1, 2, 3]]),
        "mixed-layers": PruningPlan([4, 4], [[2, 3], [0, 3]]),
    }


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("form", list(_gqa_plans()))
def test_gqa_flops_after_the_plan_are_exactly_predicted(family, form, attention):
    from tests.test_llama_adapter import tiny

    model = tiny(family, attn_implementation=attention)
    ids = torch.randint(3, 128, (2, 10), generator=torch.Generator().manual_seed(3))
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    plan = _gqa_plans()[form]
    flops = predicted_flops(model, plan, data)
    assert flops < measure_flops(model, data)
    pruned = apply_plan(copy.deepcopy(model), plan)
    assert measure_flops(pruned, data) == flops
    assert sum(p.numel() for p in pruned.parameters()) == predicted_parameter_count(model, plan)


def test_gqa_flop_prediction_counts_kv_rows_only_when_a_whole_group_goes():
    from edgeprune.pruning.cost import head_flops, kv_head_flops
    from tests.test_llama_adapter import tiny

    model = tiny("llama")  # hidden 64, head size 16, 4 query heads on 2 KV heads
    ids = torch.randint(3, 128, (2, 10), generator=torch.Generator().manual_seed(3))
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    query_head = 2 * 2 * 10 * (16 * 64 + 64 * 16) + 2 * 2 * 2 * 10 * 10 * 16
    kv_head = 2 * 2 * 10 * 2 * 16 * 64
    assert head_flops(model, 0, 2, 10) == query_head and kv_head_flops(model, 0, 2, 10) == kv_head
    dense = measure_flops(model, data)
    assert predicted_flops(model, PruningPlan([4, 4], [[0, 2], [0, 1, 2, 3]]), data) == dense - 2 * query_head
    assert predicted_flops(model, PruningPlan([4, 4], [[0, 1], [0, 1, 2, 3]]), data) == dense - 2 * query_head - kv_head


def test_gqa_flop_prediction_refuses_a_plan_that_breaks_the_groups():
    from edgeprune.errors import UserInputError
    from tests.test_llama_adapter import tiny

    ids = torch.randint(3, 128, (2, 10), generator=torch.Generator().manual_seed(3))
    with pytest.raises(UserInputError, match="KV groups"):
        predicted_flops(tiny("llama"), PruningPlan([4, 4], [[0, 1, 2], [0, 1, 2, 3]]),
                        {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
