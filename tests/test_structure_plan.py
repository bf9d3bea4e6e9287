"""StructurePlan and apply_structure: one plan on the dense model's indices for heads, FFN neurons, layers and
vocabulary, applied in one order with one compensation; the same model as the primitive stages give, exact
counts, a JSON round trip, save/load, and one-line errors."""

import copy
import json

import pytest
import torch

import edgeprune
from edgeprune.errors import UserInputError
from edgeprune.pruning import PruningPlan, apply_plan, measure_head_means
from edgeprune.pruning.ffn import intermediate_sizes, neuron_statistics, remove_neurons
from edgeprune.pruning.structure import (
    StructureCompensation,
    StructurePlan,
    apply_structure,
    ffn_kept_from_removal,
)
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary
from tests.conftest import tiny_bert

HEADS = PruningPlan([4, 4, 4], [[0, 2, 3], [1], [0, 1, 2, 3]])
FFN_REMOVAL = {0: [1, 5, 9], 1: list(range(0, 64, 2)), 2: [63]}


def batches(vocab: int = 30522) -> list[dict[str, torch.Tensor]]:
    torch.manual_seed(3)
    return [{"input_ids": torch.randint(0, vocab, (4, 12)), "attention_mask": torch.ones(4, 12, dtype=torch.long)}
            for _ in range(2)]


def plan(vocabulary: VocabularyMap | None = None) -> StructurePlan:
    return StructurePlan(HEADS, ffn_kept_from_removal([64, 64, 64], FFN_REMOVAL), [1], vocabulary)


def test_apply_structure_is_the_primitive_stages_in_order_with_compensation():
    dense = tiny_bert()
    compensation = StructureCompensation(measure_head_means(dense, batches()), neuron_statistics(dense,
                                                                                                  batches()).means)
    by_hand = copy.deepcopy(dense)
    apply_plan(by_hand, HEADS, compensation=compensation.head_means)
    remove_neurons(by_hand, FFN_REMOVAL, means=compensation.neuron_means)
    edgeprune.models.adapter_for(by_hand).remove_layers(by_hand, [1])
    cut = apply_structure(copy.deepcopy(dense), plan(), compensation)
    inputs = batches()[0]
    torch.testing.assert_close(cut(**inputs).last_hidden_state, by_hand(**inputs).last_hidden_state)
    assert sum(p.numel() for p in cut.parameters()) == sum(p.numel() for p in by_hand.parameters())
    assert intermediate_sizes(cut) == [61, 63]  # layer 1 (32 wide) went whole
    assert [b.num_heads for b in edgeprune.models.adapter_for(cut).attention_blocks(cut)] == [3, 4]


def test_exact_parameter_counts():
    dense = tiny_bert()
    hidden, before = 32, sum(p.numel() for p in dense.parameters())
    cut = apply_structure(copy.deepcopy(dense), StructurePlan(heads=HEADS, ffn_kept=ffn_kept_from_removal(
        [64, 64, 64], FFN_REMOVAL)))
    head = 3 * (hidden * 8 + 8) + hidden * 8  # q, k, v rows with biases and o columns of one 8-wide head
    neuron = hidden + 1 + hidden  # intermediate row with bias, output column
    removed = 4 * head + sum(len(v) for v in FFN_REMOVAL.values()) * neuron
    assert sum(p.numel() for p in cut.parameters()) == before - removed


def test_the_vocabulary_goes_first_and_inputs_go_through_its_map():
    dense = tiny_bert()
    vocabulary = VocabularyMap(30522, sorted({0, 100, 101, 102, *range(1000, 1200)}), 100)
    cut = apply_structure(copy.deepcopy(dense), plan(vocabulary))
    assert cut.get_input_embeddings().num_embeddings == len(vocabulary.kept_ids)
    reference = apply_structure(trim_vocabulary(copy.deepcopy(dense), vocabulary), plan())
    ids = torch.randint(1000, 1200, (2, 10))
    mask = torch.ones_like(ids)
    torch.testing.assert_close(cut(input_ids=vocabulary.apply(ids), attention_mask=mask).last_hidden_state,
                               reference(input_ids=vocabulary.apply(ids), attention_mask=mask).last_hidden_state)


def test_a_plan_round_trips_through_json():
    original = plan(VocabularyMap(30522, [0, 100, 101, 102, 2000], 100))
    again = StructurePlan.from_dict(json.loads(json.dumps(original.to_dict())))
    assert again == original
    assert original.describe() == ("4 of 12 heads removed, FFN widths [61, 32, 63], layers [1] removed, "
                                   "vocabulary 5 of 30522")
    assert StructurePlan().describe() == "dense"
    with pytest.raises(UserInputError, match="format"):
        StructurePlan.from_dict({**original.to_dict(), "format_version": 99})


def test_a_cut_model_saves_and_loads_back_equal(tmp_path):
    cut = apply_structure(tiny_bert(), plan())
    edgeprune.save(cut, tmp_path / "cut")
    loaded = edgeprune.load(tmp_path / "cut")
    inputs = batches()[0]
    torch.testing.assert_close(loaded(**inputs).last_hidden_state, cut(**inputs).last_hidden_state)


@pytest.mark.parametrize("bad, message", [
    (StructurePlan(heads=PruningPlan([4, 4], [[0], [1]])), "keeps heads of 2 layers; the model has 3"),
    (StructurePlan(layers_removed=[0, 1, 2]), "must keep one"),
    (StructurePlan(layers_removed=[5]), "layers 0..2"),
    (StructurePlan(ffn_kept=[[0, 1]]), "FFN neurons of 1 layers; the model has 3"),
])
def test_a_plan_that_does_not_match_the_model_is_one_clean_error(bad, message):
    with pytest.raises(UserInputError, match=message):
        apply_structure(tiny_bert(), bad)
