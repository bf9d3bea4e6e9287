"""Quantization recipes: each exports, runs in its runtime, matches PyTorch, and the size model holds."""

import pytest
import torch

from edgeprune.errors import UserInputError, VerificationError
from edgeprune.export import export, export_prepared, load_artifact, verify_artifact
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.pruning import prune_heads
from edgeprune.quantize import RECIPES, UNVERIFIED_RECIPES, SizeModel, any_recipe, quantize, recipe_for_runtime
from edgeprune.quantize.int4_embedding import Int4Embedding, group_size, scale_bytes_per_row
from edgeprune.quantize.int8_embedding import Int8Embedding
from edgeprune.quantize.size_model import payload_bytes
from edgeprune.runtimes import RUNTIMES
from tests.conftest import tiny_bert


def _model():
    """Two layers: an ExecuTorch export costs about 5 s a layer here, and two layers show a per-layer plan."""
    torch.manual_seed(0)
    return EncoderClassifier(tiny_bert(num_hidden_layers=2), torch.nn.Linear(32, 5)).eval()


def _inputs(count=4, seed=1):
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for i in range(count):
        ids = torch.randint(1000, 30522, (1, 24), generator=generator)
        mask = torch.ones(1, 24, dtype=torch.long)
        mask[0, 20 - i:] = 0
        inputs.append((ids, mask))
    return inputs


def test_int8_embedding_rows_are_within_half_a_step_of_the_original():
    embedding = torch.nn.Embedding(50, 16)
    quantized = Int8Embedding.from_embedding(embedding)
    ids = torch.arange(50)
    assert quantized.qweight.dtype == torch.int8
    assert torch.all((quantized(ids) - embedding(ids)).abs() <= quantized.scale / 2 + 1e-7)


@pytest.mark.parametrize(("width", "group"), [(384, 64), (96, 32), (16, 16), (6, 2)])
def test_int4_embedding_packs_two_values_a_byte_within_half_a_step_of_its_group(width, group):
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(50, width)
    with torch.no_grad():
        embedding.weight[3, 1] = 40.0  # an outlier sets the step of its own group only
    quantized = Int4Embedding.from_embedding(embedding)
    ids = torch.arange(50)
    assert quantized.packed.dtype == torch.uint8 and quantized.packed.shape == (50, width // 2)
    assert quantized.scale.dtype == torch.float16 and quantized.scale.shape == (50, width // group)
    assert group_size(width) == group and scale_bytes_per_row(width) == width // group * 2
    step = quantized.scale.float().repeat_interleave(group, dim=1)
    assert torch.all((quantized(ids) - embedding(ids)).abs() <= step / 2 + 1e-6)
    if width > group:  # the outlier's group has a coarse step; the row's other groups keep theirs
        assert step[3, 1] > 4 * step[3, -1]
    with pytest.raises(ValueError, match="odd"):
        Int4Embedding.from_embedding(torch.nn.Embedding(4, 3))


# litert-int8-static exports and verifies in tests/test_recipe_int8_static.py, litert-int4 in
# tests/test_litert_int4.py, litert-int4-all in tests/test_tied_output.py, int4-decoder and int4-decoder-all (a
# decoder's recipes: on an encoder the first is int4-linear, the second needs calibration) in
# tests/test_decoder_recipe.py
@pytest.mark.parametrize("name", [name for name in RECIPES.names()
                                  if name not in ("litert-int8-static", "litert-int4", "litert-int4-all",
                                                  "int4-decoder", "int4-decoder-all")])
def test_recipe_exports_an_artifact_that_matches_its_pytorch_source_and_the_size_model(name, tmp_path):
    recipe = any_recipe(name)
    suffix = RUNTIMES.get(recipe.runtime).suffix
    inputs = _inputs()
    sizes = SizeModel()
    for index, model in enumerate((_model(), prune_heads(_model(), {0: [0, 1], 1: [1, 2, 3]}))):
        prepared = quantize(model, recipe, calibration=_inputs(8, seed=3) if recipe.calibrated else None)
        artifact = export_prepared(prepared, inputs[0], tmp_path / f"{index}{suffix}", recipe)
        assert artifact.runtime == recipe.runtime and artifact.recipe == name
        check = verify_artifact(prepared, load_artifact(artifact.path), inputs, recipe.min_cosine)
        assert check.passed and check.num_inputs == 4
        if index == 0:
            sizes.observe(model, recipe, artifact.size_bytes)
        else:  # calibrated on the dense export, the size model predicts the pruned one
            predicted = sizes.predict(model, recipe)
            assert abs(predicted - artifact.size_bytes) <= 0.05 * artifact.size_bytes, (predicted, artifact.size_bytes)


def test_smaller_recipes_make_smaller_payloads():
    model = _model()
    sizes = {name: payload_bytes(model, any_recipe(name)) for name in RECIPES.names() + list(UNVERIFIED_RECIPES)}
    assert sizes["int8-emb4"] < sizes["int8"] < sizes["int8-linear"] < sizes["fp32"]
    assert sizes["int4-linear"] < sizes["int8"]
    assert sizes["litert-int8"] < sizes["litert-fp16"] < sizes["litert-fp32"] == sizes["fp32"]
    # static int8 stores what dynamic int8 stores; only when activations are quantized differs
    assert sizes["int8-static"] == sizes["int8"]
    # edgeprune's int8 tables keep 4 bytes a row where LiteRT's per-channel format keeps 12
    table_rows = sum(m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding))
    assert sizes["litert-int8"] - sizes["litert-int8-static"] == 8 * table_rows


def test_a_recipe_for_another_runtime_is_refused_with_the_right_names():
    with pytest.raises(UserInputError, match="builds a executorch artifact, not litert; litert recipes: litert-fp16"):
        recipe_for_runtime("int8", "litert")
    with pytest.raises(UserInputError, match="unknown quantization recipe 'int3'; choose one of: fp32, int4, "
                                             "int4-decoder, int4-decoder-all, int4-l"):
        recipe_for_runtime("int3", "executorch")


def test_export_cache_reuses_an_identical_export(tmp_path):
    model = _model()
    inputs = _inputs(1)[0]
    first = export(model, inputs, tmp_path / "a.pte", "fp32", cache_dir=tmp_path / "cache", cache_key="k")
    second = export(model, inputs, tmp_path / "b.pte", "fp32", cache_dir=tmp_path / "cache", cache_key="k")
    assert not first.cached and second.cached
    assert (tmp_path / "a.pte").read_bytes() == (tmp_path / "b.pte").read_bytes()


def test_verification_rejects_an_artifact_outside_tolerance(tmp_path):
    artifact = export(_model(), _inputs(1)[0], tmp_path / "m.pte", "fp32")
    other = _model()
    with torch.no_grad():
        other.classifier.weight.mul_(-1)
    with pytest.raises(VerificationError, match="cosine"):
        verify_artifact(other, load_artifact(artifact.path), _inputs(2), 0.999)
