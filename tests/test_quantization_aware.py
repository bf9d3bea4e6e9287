"""Quantization-aware recovery: a student distilled through litert-int4's asymmetric 4-bit grid (straight-through)
and left on it, so that its litert-int4 artifact holds the recovered weights exactly."""

import json

import pytest
import torch

import edgeprune.cli
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.io import load, save
from edgeprune.pruning import prune_heads
from edgeprune.quantize.block_offsets import BlockOffsetLinear, grid_linears
from edgeprune.recovery.config import DistillConfig
from edgeprune.recovery.weight_grid import trained_on_grid

GROUP = 32


def on_its_grid(linear: torch.nn.Linear) -> bool:
    return torch.allclose(BlockOffsetLinear(linear, GROUP).dense_weight(), linear.weight, rtol=0, atol=1e-6)


def test_inside_the_linears_multiply_by_their_4_bit_grid_with_a_straight_through_gradient_and_stay_on_it():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 48), torch.nn.Linear(48, 8))
    original = [m.weight.detach().clone() for m in model]
    quantized = BlockOffsetLinear(model[0], GROUP).dense_weight().detach()
    x = torch.randn(5, 64)
    with trained_on_grid(model, GROUP) as count:
        assert count == 2  # 64 and 32 wide; 48 is no whole number of blocks
        hidden = model[0](x)
        assert torch.allclose(hidden, torch.nn.functional.linear(x, quantized, model[0].bias), atol=1e-6)
        hidden.sum().backward()
        weight = model[0].parametrizations.weight.original
        assert torch.allclose(weight.grad, torch.ones(5, 32).T @ x, atol=1e-5)  # as if the weight were float
        with torch.no_grad():
            weight.add_(0.01)  # a training step moves the float weight off the grid
    assert on_its_grid(model[0]) and on_its_grid(model[1])
    assert not torch.equal(model[0].weight, original[0])
    assert torch.equal(model[2].weight, original[2])  # untouched


def test_the_config_names_a_recipe_with_such_a_grid_and_round_trips():
    from edgeprune.cli.recovery import GRID_RECIPES
    from edgeprune.quantize import RECIPES
    from edgeprune.recovery.weight_grid import grid_of

    config = DistillConfig(quantization_aware="litert-int4")
    assert DistillConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(UserInputError, match="trains on an asymmetric 4-bit grid .*; litert-int8 stores"):
        DistillConfig(quantization_aware="litert-int8")
    # the CLI offers exactly the recipes with such a grid: LiteRT's 4-bit ones and ExecuTorch's split ones
    with_grid = []
    for name in RECIPES.names():
        try:
            with_grid.append((name, grid_of(name)))
        except UserInputError:
            pass
    assert sorted(with_grid) == sorted((name, 32) for name in GRID_RECIPES)


def test_distill_through_the_cli_leaves_a_decoder_on_litert_int4s_grid_and_its_artifact_holds_it(tmp_path, capsys):
    from edgeprune.export import export
    from edgeprune.models.classifier import CausalLMLogits
    from tests._byo import tiny_llama_dir

    teacher = tiny_llama_dir(tmp_path / "llama", heads=4, kv_heads=2)
    pruned = save(prune_heads(load(teacher), {0: [0, 1]}), tmp_path / "pruned", source=teacher)
    out = tmp_path / "recovered"
    code = edgeprune.cli.main(["distill", "--task", "smollm2-bbc", "--teacher-model", str(teacher), "--model",
                               str(pruned), "--max-length", "16", "--max-steps", "3", "--eval-every", "3",
                               "--train-limit", "24", "--quantization-aware", "litert-int4", "--out", str(out),
                               "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "distill.json").read_text())["result"]["config"]["quantization_aware"] == "litert-int4"
    recovered = load(out)
    linears = grid_linears(recovered, GROUP)
    assert len(linears) == 2 * 6 + 1  # q, k, v, gate, up, down of 2 layers; o_proj of layer 1 (16 wide in layer 0)
    assert all(on_its_grid(linear) for linear in linears)
    assert [block.num_heads for block in adapter_for(recovered).attention_blocks(recovered)] == [2, 4]
    example = (torch.arange(3, 19)[None], torch.arange(16))
    artifact = export(CausalLMLogits(recovered, 32).eval(), example, tmp_path / "int4.tflite", "litert-int4",
                      verify_on=[example])
    assert artifact.verification.min_cosine >= 0.999

    code = edgeprune.cli.main(["distill", "--task", "smollm2-bbc", "--teacher-model", str(teacher), "--model",
                               str(pruned), "--quantization-aware", "int4", "--out", str(tmp_path / "x")])
    assert code == 2 and "'int4' is not one of 'litert-int4', 'litert-int4-all'" in capsys.readouterr().err


def test_fit_offers_auto_none_and_each_grid_recipe_for_its_recovery(capsys):
    code = edgeprune.cli.main(["fit", "--task", "smollm2-bbc", "--device", "host", "--recover-quantization-aware",
                               "int4"])
    assert code == 2
    assert "'int4' is not one of 'auto', 'none', 'litert-int4', 'litert-int4-all', 'int4-decoder', " \
        "'int4-decoder-all'" in capsys.readouterr().err


def test_the_output_layer_is_placed_by_gptq_then_trained_through_its_grid_with_its_tied_table():
    """With calibration, `trained_on_grid` places a tied output layer by GPTQ, then multiplies by its grid (bfloat16
    steps, as the export's GPTQ places it) while the embedding table looks rows up on the same grid; gradients
    reach the one shared float weight from both; afterwards the layer is on its grid, the table tied to it again,
    and the export's GPTQ places it exactly there."""
    from edgeprune.quantize.formats import output_layer
    from edgeprune.quantize.gptq import gptq_blocks, input_moment
    from edgeprune.recovery.weight_grid import GridLookup, output_grid
    from tests.test_tied_output import calibration, tied_decoder

    model = tied_decoder(layer_std=0.05)
    inner = model.model
    head, table = output_layer(model), inner.get_input_embeddings()
    assert table.weight is head.weight and not torch.equal(output_grid(head.weight, GROUP), head.weight)
    batches = calibration()
    ids = batches[0][0]
    with trained_on_grid(model, GROUP, lambda: [model(*batch) for batch in batches]) as count:
        assert count == 2 * 7 + 1  # every linear of both layers (64 and 128 wide) and the output layer
        original = head.parametrizations.weight.original
        assert isinstance(inner.get_input_embeddings(), GridLookup)
        on_grid = output_grid(original, GROUP)
        hidden = torch.randn(3, 64)
        logits = head(hidden)
        assert torch.allclose(logits, hidden @ on_grid.T, atol=1e-5)
        rows = inner.get_input_embeddings()(ids)
        assert torch.equal(rows, on_grid[ids])
        (logits.sum() + rows.sum()).backward()
        expected = torch.ones(3, 512).T @ hidden  # straight through: as if the weight were float
        expected.index_add_(0, ids.reshape(-1), torch.ones(ids.numel(), 64))
        assert torch.allclose(original.grad, expected, atol=1e-4)
        with torch.no_grad():
            original.add_(0.003 * torch.randn_like(original))  # a training step moves it off the grid
    assert inner.get_input_embeddings() is table and table.weight is head.weight
    assert torch.equal(output_grid(head.weight, GROUP), head.weight)
    symmetric, offsets = gptq_blocks(head.weight, input_moment(model, head, batches), GROUP)
    assert torch.allclose(symmetric + offsets.repeat_interleave(GROUP, dim=1), head.weight, rtol=0, atol=1e-6)


def test_only_the_recipes_with_a_4_bit_output_layer_train_it():
    from edgeprune.recovery.weight_grid import trains_output_layer

    assert [name for name in ("litert-int4", "litert-int4-all", "int4-decoder", "int4-decoder-all")
            if trains_output_layer(name)] == ["litert-int4-all", "int4-decoder-all"]
