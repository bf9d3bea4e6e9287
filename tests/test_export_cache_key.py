"""The export cache is keyed by a recipe's whole configuration, not its name (issue 30): a recipe changed under the
same name (here its 4-bit group size) misses the cache and is exported again."""

import dataclasses

import torch
from torch import nn

from edgeprune.export import content_key, export
from edgeprune.quantize import RECIPES, payload_bytes


def linear_module() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 8)).eval(), (torch.randn(1, 128),)


def test_a_recipe_changed_under_its_name_misses_the_export_cache(tmp_path):
    module, example = linear_module()
    group_32 = RECIPES.get("int4-linear")
    group_64 = dataclasses.replace(group_32, group_size=64)
    assert group_64.name == group_32.name
    key_32, key_64 = content_key(module, group_32, example), content_key(module, group_64, example)
    assert key_32 != key_64
    assert content_key(module, "int4-linear", example) == key_32  # a name means the registered recipe
    cache = tmp_path / "exports"

    first = export(module, example, tmp_path / "g32.pte", group_32, cache, key_32)
    second = export(module, example, tmp_path / "g64.pte", group_64, cache, key_64)
    assert not first.cached and not second.cached
    assert first.path.read_bytes() != second.path.read_bytes()  # half as many scales at group 64
    assert export(module, example, tmp_path / "again.pte", group_64, cache, key_64).cached


def test_the_prose_of_a_recipe_is_not_part_of_its_key():
    module, example = linear_module()
    recipe = RECIPES.get("int4-linear")
    reworded = dataclasses.replace(recipe, description="the same bytes, said otherwise")
    assert content_key(module, recipe, example) == content_key(module, reworded, example)


def test_the_group_size_decides_which_linears_stay_at_8_bits_and_their_bytes():
    module, _ = linear_module()
    group_32 = RECIPES.get("int4-linear")
    group_128 = dataclasses.replace(group_32, group_size=128)
    first, second = module[0], module[2]
    assert group_32.int4_fits(first) and group_32.int4_fits(second)
    assert group_128.int4_fits(first) and not group_128.int4_fits(second)  # 64 inputs: 8 bits at group 128
    # ExecuTorch: 4-bit data is half a byte a weight plus a 2-byte scale per group of a row; int8 one byte plus a
    # 4-byte scale per row. 128 -> 64 at groups of 32: 4096 + 64*4*2, at 128: 4096 + 64*1*2; 64 -> 8 at groups of 32:
    # 256 + 8*2*2, at 128 it is int8: 512 + 8*4; the biases are fp32 either way
    assert payload_bytes(module, group_32) == 4096 + 512 + 256 + 32 + 72 * 4
    assert payload_bytes(module, group_128) == 4096 + 128 + 512 + 32 + 72 * 4


def test_a_generator_whose_config_names_other_token_ids_is_another_program():
    """The program's metadata methods carry the end-of-text and start ids (ExecuTorch's LLM runner stops on them);
    they live in the config, not the weights, so the key names them: otherwise a cached program would stop on the
    old end of text."""
    from tests.test_generation import PREFILL, tiny_decoder

    model = tiny_decoder()
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    key = content_key(model, "fp32", example)
    assert content_key(tiny_decoder(), "fp32", example) == key  # the same weights and config
    model.model.config.eos_token_id = 7
    assert content_key(model, "fp32", example) != key
    other_start = tiny_decoder()
    other_start.model.config.bos_token_id = 5
    assert content_key(other_start, "fp32", example) != key
