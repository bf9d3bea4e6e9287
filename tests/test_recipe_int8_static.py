"""Static (calibrated) int8 recipes: calibration is required, every linear gets fixed activation ranges
from it, and the artifacts store int8 weights."""

import numpy as np
import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.export import export, load_artifact, verify_artifact
from edgeprune.models.classifier import EncoderClassifier
from edgeprune.quantize import RECIPES, any_recipe, quantize
from tests.conftest import tiny_bert

# unregistered while they fail verification on MiniLM (docs/FINDINGS.md); `any_recipe` finds them either way
STATIC = ["int8-static", "litert-int8-static"]


def _model():
    torch.manual_seed(0)
    return EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()


def _inputs(count=4, seed=1, length=24):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randint(1000, 30522, (1, length), generator=generator), torch.ones(1, length, dtype=torch.long))
            for _ in range(count)]


def _targets(graph_module, op_name):
    return [n for n in graph_module.graph.nodes if n.op == "call_function" and str(n.target) == op_name]


@pytest.mark.parametrize("name", STATIC)
def test_a_calibrated_recipe_refuses_to_run_without_calibration_inputs(name):
    recipe = any_recipe(name)
    assert recipe.calibrated and not any(RECIPES.get(other).calibrated for other in RECIPES.names()
                                         if other not in STATIC)
    with pytest.raises(UserInputError, match=f"recipe '{name}' calibrates on real task inputs and needs them"):
        quantize(_model(), recipe)
    with pytest.raises(UserInputError, match="must share the exported input shape; got 2 different shapes"):
        quantize(_model(), recipe, _inputs(2) + _inputs(1, length=16))


@pytest.mark.parametrize("name", STATIC)
def test_every_linear_gets_per_channel_int8_weights_and_static_input_ranges(name):
    model = _model()
    converted = quantize(model, any_recipe(name), _inputs())
    linears = _targets(converted, "aten.linear.default")
    # the pooler is dead code in the exported graph: every linear that runs is quantized
    assert len(linears) == sum(isinstance(m, torch.nn.Linear) for m in model.modules()) - 1
    for linear in linears:
        activation, weight = linear.args[0], linear.args[1]
        assert str(weight.target) == "quantized_decomposed.dequantize_per_channel.default"
        assert str(activation.target) == "quantized_decomposed.dequantize_per_tensor.default"
        scale, zero_point = activation.args[1], activation.args[2]
        assert isinstance(scale, float) and scale > 0 and isinstance(zero_point, int)  # fixed at calibration
    assert not _targets(converted, "quantized_decomposed.choose_qparams.tensor")  # nothing measured at run time
    # the source module is left untouched
    assert all(isinstance(p, torch.nn.Parameter) and p.dtype == torch.float32 for p in model.parameters())


def test_activation_ranges_come_from_the_calibration_inputs():
    def first_input_scale(calibration):
        converted = quantize(_model(), any_recipe("int8-static"), calibration)
        return _targets(converted, "aten.linear.default")[0].args[0].args[1]

    assert first_input_scale(_inputs(seed=1)) != first_input_scale(_inputs(seed=2))
    assert first_input_scale(_inputs(seed=1)) == first_input_scale(_inputs(seed=1))


def test_litert_static_artifact_stores_every_linear_weight_as_int8_and_matches_pytorch(tmp_path):
    model = _model()
    calibration = _inputs()
    recipe = any_recipe("litert-int8-static")
    artifact = export(model, calibration[0], tmp_path / "m.tflite", recipe, calibration=calibration)
    from ai_edge_litert.interpreter import Interpreter

    tensors = Interpreter(str(artifact.path)).get_tensor_details()
    weight_shapes = sorted(tuple(m.weight.shape) for name, m in model.named_modules()
                           if isinstance(m, torch.nn.Linear) and "pooler" not in name)
    int8_matrices = sorted(tuple(t["shape"]) for t in tensors if t["dtype"] == np.int8 and len(t["shape"]) == 2
                           and tuple(t["shape"]) in set(weight_shapes))
    assert int8_matrices == weight_shapes
    program = load_artifact(artifact.path)
    # the logits leave the graph as int8; the runner reads them back through their scale and zero point
    assert all(output.dtype == torch.float32 for output in program(*calibration[0]))
    check = verify_artifact(quantize(model, recipe, calibration), program, _inputs(seed=5), recipe.min_cosine)
    assert check.passed
