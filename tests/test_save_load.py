"""A pruned model with a different head count in every layer saves and loads again, exactly."""

import pytest
import torch

import edgeprune
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from tests.conftest import tiny_bert


def test_round_trip_keeps_per_layer_heads_and_outputs(tmp_path):
    model = edgeprune.prune_heads(tiny_bert(), {0: [0], 1: [1, 2], 2: [0, 1, 3]})
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    assert [b.num_heads for b in adapter_for(again).attention_blocks(again)] == [3, 2, 1]
    assert [b.original_heads for b in adapter_for(again).attention_blocks(again)] == [(1, 2, 3), (0, 3), (2,)]
    assert sum(p.numel() for p in again.parameters()) == sum(p.numel() for p in model.parameters())
    ids = torch.randint(1000, 30522, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).last_hidden_state, model(input_ids=ids).last_hidden_state)


def test_dense_model_round_trips_too(tmp_path):
    edgeprune.save(tiny_bert(), tmp_path / "dense")
    assert sum(p.numel() for p in edgeprune.load(tmp_path / "dense").parameters()) == sum(
        p.numel() for p in tiny_bert().parameters())


def test_errors(tmp_path):
    with pytest.raises(UserInputError, match="transformers model"):
        edgeprune.save(torch.nn.Linear(2, 2), tmp_path / "x")
    with pytest.raises(UserInputError, match="no config.json"):
        edgeprune.load(tmp_path)
