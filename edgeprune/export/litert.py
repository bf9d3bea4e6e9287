"""LiteRT: `litert-torch` converts to `.tflite`, `ai-edge-quantizer` quantizes the flatbuffer (fp16, dynamic
int8) or the converter turns a PT2E-calibrated module's quantize/dequantize pairs into int8 ops (static
int8), and the `ai-edge-litert` interpreter (XNNPACK delegate) runs it. Integer inputs become int32 in the converted
graph, so the runner casts them."""

import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgeprune.errors import VerificationError
from edgeprune.export.base import DeviceRuntime, RunArtifact
from edgeprune.quantize.recipes import Recipe

# what the interpreter says of a valid model whose ops this machine's LiteRT lacks (the device's may have them)
MISSING_OP = ("unresolved custom op", "Didn't find op for builtin opcode")


class LiteRTProgram:
    def __init__(self, path: Path, threads: int | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.path = Path(path)
        self._interpreter = Interpreter(str(self.path), num_threads=threads or 1)
        self._runner = self._interpreter.get_signature_runner()
        details = self._runner.get_input_details()
        # converted signatures name inputs args_0, args_1, ... in call order
        self._inputs = sorted(details, key=lambda name: int(name.rsplit("_", 1)[-1]))
        self._dtypes = {name: details[name]["dtype"] for name in self._inputs}
        # a statically quantized graph can end in an int8 tensor (e.g. the logits of a quantized classifier):
        # read it back as float through its (scale, zero point)
        self._output_quantization = {name: detail["quantization"] for name, detail in
                                     self._runner.get_output_details().items()
                                     if np.issubdtype(detail["dtype"], np.integer) and detail["quantization"][0] > 0}

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        feed = {name: tensor.numpy().astype(self._dtypes[name]) for name, tensor in zip(self._inputs, inputs,
                                                                                         strict=True)}
        outputs = self._runner(**feed)
        for name, (scale, zero_point) in self._output_quantization.items():
            outputs[name] = ((outputs[name].astype(np.float32) - zero_point) * scale).astype(np.float32)
        return [torch.from_numpy(np.array(outputs[name])) for name in
                sorted(outputs, key=lambda name: int(name.rsplit("_", 1)[-1]))]


class LiteRTRuntime(DeviceRuntime):
    name = "litert"
    suffix = ".tflite"
    title = "a LiteRT model"
    identifier = b"TFL3"
    extra = "litert"

    def check_file(self, path: Path, head: bytes, size: int) -> None:
        """The interpreter's flatbuffer verifier: it bounds-checks every table and buffer, so a cut-off file fails."""
        super().check_file(path, head, size)
        from ai_edge_litert.interpreter import Interpreter

        try:
            Interpreter(str(path), num_threads=1)
        except ValueError as error:
            if not any(text in str(error) for text in MISSING_OP):
                message = " ".join(str(error).split())
                raise VerificationError(f"{path} is not {self.title} in one piece ({message}); export or "
                                        "copy it again") from None

    def lower(self, module: nn.Module, example_inputs: tuple[torch.Tensor, ...], recipe: Recipe) -> bytes:
        import litert_torch

        # the converter and the quantizer print progress to stdout, which belongs to edgeprune's results
        with tempfile.TemporaryDirectory(prefix="edgeprune-litert-") as scratch, redirect_stdout(sys.stderr):
            float_path = Path(scratch) / "model.tflite"
            module.eval()  # not chained: a PT2E-converted module's eval() returns None
            if recipe.calibrated:
                from litert_torch.quantize.quant_config import QuantConfig

                from edgeprune.quantize.static_int8 import litert_quantizer

                config = QuantConfig(pt2e_quantizer=litert_quantizer())
                litert_torch.convert(module, example_inputs, quant_config=config).export(str(float_path))
                return float_path.read_bytes()
            litert_torch.convert(module, example_inputs).export(str(float_path))
            if recipe.litert_quantization is None:
                return float_path.read_bytes()
            return _quantize(float_path, recipe)

    def load(self, path: Path, threads: int | None = None) -> RunArtifact:
        return LiteRTProgram(path, threads)


def _quantize(float_path: Path, recipe: Recipe) -> bytes:
    from ai_edge_quantizer import algorithm_manager, qtyping, quantizer
    from ai_edge_quantizer import recipe as aeq_recipes

    tool = quantizer.Quantizer(str(float_path))
    if recipe.litert_quantization == "dynamic-int8":
        tool.load_quantization_recipe(aeq_recipes.dynamic_wi8_afp32())
    else:
        tool.add_weight_only_config(".*", qtyping.TFLOperationName.ALL_SUPPORTED, 16,
                                    algorithm_key=algorithm_manager.AlgorithmName.FLOAT_CASTING)
    return tool.quantize().quantized_model
