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
