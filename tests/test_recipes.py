"""Quantization recipes: each exports, runs in ExecuTorch, matches PyTorch, and the size model holds."""

import pytest
import torch

from edgeprune.export import ExecutorchProgram, export_executorch, verify_artifact
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.quantize import RECIPES, SizeModel, quantize
from edgeprune.quantize.int8_embedding import Int8Embedding
from edgeprune.quantize.size_model import payload_bytes
from tests.conftest import tiny_bert


def _model():
    torch.manual_seed(0)
    return EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()


def _inputs(count=4):
    generator = torch.Generator().manual_seed(1)
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
    error = (quantized(ids) - embedding(ids)).abs()
    assert quantized.qweight.dtype == torch.int8
    assert torch.all(error <= quantized.scale / 2 + 1e-7)


@pytest.mark.parametrize("name", RECIPES.names())
def test_recipe_exports_a_pte_that_matches_its_pytorch_source_and_the_size_model(name, tmp_path):
    recipe = RECIPES.get(name)
    model = _model()
    quantized = quantize(model, name)
    inputs = _inputs()
    artifact = export_executorch(quantized, inputs[0], tmp_path / f"{name}.pte")
    program = ExecutorchProgram(artifact.path)
    check = verify_artifact(quantized, program, inputs, recipe.min_cosine)
    assert check.passed and check.num_inputs == 4
    # the file is the weights the recipe stores plus a small, bounded container overhead
    payload = payload_bytes(model, recipe)
    assert payload <= artifact.size_bytes <= payload + 64 * 1024
    sizes = SizeModel()
    sizes.observe(model, recipe, artifact.size_bytes)
    assert sizes.predict(model, recipe) == artifact.size_bytes


def test_int8_recipes_shrink_the_file_in_the_expected_order():
    model = _model()
    sizes = {name: payload_bytes(model, RECIPES.get(name)) for name in RECIPES.names()}
    assert sizes["int8"] < sizes["int8-linear"] < sizes["fp32"]


def test_export_cache_reuses_an_identical_export(tmp_path):
    model = quantize(_model(), "fp32")
    inputs = _inputs(1)[0]
    first = export_executorch(model, inputs, tmp_path / "a.pte", cache_dir=tmp_path / "cache", cache_key="k")
    second = export_executorch(model, inputs, tmp_path / "b.pte", cache_dir=tmp_path / "cache", cache_key="k")
    assert not first.cached and second.cached
    assert (tmp_path / "a.pte").read_bytes() == (tmp_path / "b.pte").read_bytes()


def test_verification_rejects_an_artifact_outside_tolerance(tmp_path):
    from edgeprune.errors import VerificationError

    model = _model()
    artifact = export_executorch(model, _inputs(1)[0], tmp_path / "m.pte")
    other = _model()
    with torch.no_grad():
        other.classifier.weight.mul_(-1)
    with pytest.raises(VerificationError, match="cosine"):
        verify_artifact(other, ExecutorchProgram(artifact.path), _inputs(2), 0.999)
