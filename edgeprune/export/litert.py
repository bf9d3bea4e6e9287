"""LiteRT: `litert-torch` converts to `.tflite`, `ai-edge-quantizer` quantizes the flatbuffer (fp16, dynamic
int8, 4-bit blocks: their linears split into symmetric blocks and offsets first, edgeprune/quantize/block_offsets.py,
and their codes made exact afterwards, edgeprune/export/litert_blocks.py) or the converter turns a PT2E-calibrated
module's quantize/dequantize pairs into int8 ops (static int8), and the `ai-edge-litert` interpreter (XNNPACK
delegate) runs it. Integer inputs become int32 in the converted graph, so the runner casts them."""

import copy
import json
import re
import sys
import tempfile
from collections.abc import Iterable, Sequence
from contextlib import redirect_stdout
from pathlib import Path

import numpy as np
import torch
from torch import nn

from edgeprune.errors import VerificationError
from edgeprune.export.base import DeviceRuntime, RunArtifact
from edgeprune.export.litert_blocks import rewrite_block_codes
from edgeprune.export.litert_buffers import share_identical_buffers
from edgeprune.export.litert_generator import (
    METADATA_NAME,
    PREFILL,
    LiteRTGenerator,
    convert_generator,
    read_metadata,
    read_metadata_at,
    with_metadata,
)
from edgeprune.export.program_facts import ProgramFacts, RuntimeInfo, TensorSpec, package_version
from edgeprune.progress import library_output_hidden
from edgeprune.quantize.block_offsets import split_block_offsets
from edgeprune.quantize.recipes import Recipe
from edgeprune.runtimes.litert import LITERT

# what the interpreter says of a valid model whose ops this machine's LiteRT lacks (the device's may have them)
MISSING_OP = ("unresolved custom op", "Didn't find op for builtin opcode")


class LiteRTProgram:
    def __init__(self, path: Path, threads: int | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.path = Path(path)
        self._interpreter = Interpreter(str(self.path), num_threads=threads or 1)
        # applies the default (XNNPACK) delegate now, while `load_artifact` hides what LiteRT prints about it,
        # rather than at the first call
        self._interpreter.allocate_tensors()
        self._runner = self._interpreter.get_signature_runner()
        details = self._runner.get_input_details()
        self._inputs = signature_order(details)
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
        return [torch.from_numpy(np.array(outputs[name])) for name in signature_order(outputs)]


def signature_order(names: Iterable[str]) -> list[str]:
    """Signature keys in call order: converted signatures name them args_0, args_1, ... and output_0, ..."""
    def position(name: str) -> tuple[int, str]:
        suffix = name.rsplit("_", 1)[-1]
        return (int(suffix), name) if suffix.isdigit() else (1 << 30, name)

    return sorted(names, key=position)


class LiteRTRuntime(DeviceRuntime):
    spec = LITERT

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
        generator = hasattr(module, "program_spec") and module.program_spec(example_inputs) is not None
        import litert_torch

        if recipe.litert_quantization == "dynamic-int4":
            module = with_block_offsets(module, recipe.group_size)

        # the converter and the quantizer print progress to stdout, which belongs to edgeprune's results
        with tempfile.TemporaryDirectory(prefix="edgeprune-litert-") as scratch, redirect_stdout(sys.stderr):
            float_path = Path(scratch) / "model.tflite"
            module.eval()  # not chained: a PT2E-converted module's eval() returns None
            if generator:
                spec = convert_generator(module, example_inputs, float_path)
                # written before quantizing: ai-edge-quantizer keeps a model's metadata, and its output may keep
                # weights past the flatbuffer at offsets that a rewrite would have to move
                float_path.write_bytes(with_metadata(float_path.read_bytes(), METADATA_NAME,
                                                     json.dumps(spec.metadata).encode()))
                if recipe.litert_quantization is None:
                    return float_path.read_bytes()
                data = _quantize(float_path, recipe)
                if read_metadata(data) != spec.metadata:
                    raise VerificationError(f"{recipe.name} lost the generator's metadata while quantizing")
                return data
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
        constants = read_metadata_at(Path(path))
        if constants.get("use_kv_cache"):
            from ai_edge_litert.interpreter import Interpreter

            interpreter = Interpreter(str(path), num_threads=threads or 1)
            interpreter.allocate_tensors()  # the default (XNNPACK) delegate now, while load_artifact hides its line
            return LiteRTGenerator(interpreter, constants)
        return LiteRTProgram(path, threads)

    def inspect(self, path: Path) -> ProgramFacts:
        """Inputs and outputs as the interpreter's signature runner takes and returns them, op codes from the model's
        flatbuffer, and the delegate the interpreter applied when it loaded the model here."""
        from ai_edge_litert.interpreter import Interpreter

        try:
            with library_output_hidden():  # LiteRT's line about the delegate it created
                interpreter = Interpreter(str(path), num_threads=1)
                interpreter.allocate_tensors()  # applies the default delegate (before a runner holds its tensors)
            signatures = interpreter.get_signature_list()
            # a generator's prefill is the call its example inputs (and verification) make
            method = PREFILL if PREFILL in signatures else next(iter(signatures))
            runner = interpreter.get_signature_runner(method)
            inputs = _tensor_specs(runner.get_input_details())
            outputs = _tensor_specs(runner.get_output_details())
        except (ValueError, RuntimeError, StopIteration) as error:
            message = " ".join(str(error).split()) or "it has no signature"
            raise VerificationError(f"litert cannot read {path} here ({message})") from None
        data = Path(path).read_bytes()
        schema_version, operators = read_op_codes(data)
        constants = read_metadata(data)
        # the file names no delegate: the interpreter hands what it can to its default CPU delegate (XNNPACK) as it
        # loads the model, leaving DELEGATE nodes in its graph (_get_ops_details: the interpreter's only op listing)
        delegated = any(op.get("op_name") == "DELEGATE" for op in interpreter._get_ops_details())
        flow = "the cache goes into each call, its own rows come out"
        notes = [f"signatures: {', '.join(sorted(signatures))} ({flow})"] if constants else []
        note = ("delegates: applied by the LiteRT interpreter when it loaded the model here (its default XNNPACK CPU "
                "delegate), not named in the file; an app enables XNNPACK in its interpreter options")
        return ProgramFacts(RuntimeInfo(self.name, "ai-edge-litert", package_version("ai-edge-litert"), schema_version),
                            method, inputs, outputs, operators, ["XNNPACK"] if delegated else [], constants=constants,
                            notes=[*notes, note])


def _tensor_specs(details: dict[str, dict]) -> list[TensorSpec]:
    specs = []
    for name in signature_order(details):
        detail = details[name]
        scale, zero_point = detail["quantization"]
        specs.append(TensorSpec(name, [int(size) for size in detail["shape"]], np.dtype(detail["dtype"]).name,
                                runtime_name=name,
                                quantization=[float(scale), float(zero_point)] if scale > 0 else None))
    return specs


def read_op_codes(data: bytes) -> tuple[int, list[str]]:
    """(schema version, op code names) of a .tflite flatbuffer: builtin names (FULLY_CONNECTED), custom op names."""
    from ai_edge_litert import schema_py_generated as schema

    builtin_names = {value: name for name, value in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    model = schema.Model.GetRootAs(data, 0)
    names = set()
    for index in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(index)
        # codes past 127 live in builtin_code; deprecated_builtin_code holds the code for older readers
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        custom = code.CustomCode()
        names.add(custom.decode() if custom else builtin_names.get(builtin, f"BUILTIN_{builtin}"))
    return int(model.Version()), sorted(names)


def with_block_offsets(module: nn.Module, group: int) -> nn.Module:
    """A copy of `module` whose grid linears (all but a language model's output layer, whole blocks wide) are
    asymmetric 4-bit blocks split into a symmetric part and offsets."""
    split = copy.deepcopy(module)
    split_block_offsets(split, group)
    return split


def _quantize(float_path: Path, recipe: Recipe) -> bytes:
    from ai_edge_quantizer import algorithm_manager, qtyping, quantizer
    from ai_edge_quantizer import recipe as aeq_recipes

    if recipe.litert_quantization == "dynamic-int4":
        data = _quantize_blocks(float_path)
        # a calibrated output layer's tied lookup holds the output layer's codes: one copy of them in the file
        return share_identical_buffers(data)[0] if recipe.output_layer_calibrated else data
    tool = quantizer.Quantizer(str(float_path))
    if recipe.litert_quantization == "dynamic-int8":
        tool.load_quantization_recipe(aeq_recipes.dynamic_wi8_afp32())
    else:
        tool.add_weight_only_config(".*", qtyping.TFLOperationName.ALL_SUPPORTED, 16,
                                    algorithm_key=algorithm_manager.AlgorithmName.FLOAT_CASTING)
    return tool.quantize().quantized_model


def _quantize_blocks(float_path: Path, at_8_bits: Sequence[str] = ()) -> bytes:
    """litert-int4's quantization of a converted model whose linears were split (`with_block_offsets`): int8 per
    channel with int8 dynamic activations for every weight, the offsets' (a rows × blocks matrix applied to the block
    sums) included; 4-bit blocks of 32 for the symmetric parts, their codes then made exact. With int8 offsets a
    SmolLM2 decode step took 5.46 ms against 5.77 for fp16 ones, which XNNPACK widens to fp32 when it loads the
    model, at the same perplexity (docs/FINDINGS.md, 2026-12-06, fourth session). A symmetric part the converter
    folded off its grid is quantized again at int8 (`at_8_bits`: op scopes)."""
    from ai_edge_quantizer import quantizer
    from ai_edge_quantizer import recipe as aeq_recipes

    # an op's scope is its output's name, the module path with each module's class: "...BlockOffsetLinear_q_proj;1"
    # for a symmetric part, ".../BlockOffsetLinear_q_proj/torch.nn.modules.linear.Linear_block_offsets;1" for its
    # offsets, which stay under the int8 rule
    int8 = aeq_recipes.dynamic_wi8_afp32()
    split = [dict(rule, regex=r"\.BlockOffsetLinear_[^/]*$", operation="FULLY_CONNECTED")
             for rule in aeq_recipes.dynamic_wi4b32_afp32()]
    folded = [dict(rule, regex=f"^{re.escape(scope)}$", operation="FULLY_CONNECTED") for scope in at_8_bits
              for rule in int8]
    tool = quantizer.Quantizer(str(float_path))
    tool.load_quantization_recipe(int8 + split + folded)
    data, _, off_grid = rewrite_block_codes(tool.quantize().quantized_model, float_path.read_bytes())
    if off_grid and not at_8_bits:
        return _quantize_blocks(float_path, off_grid)
    if off_grid:
        raise VerificationError(f"litert-int4: {len(off_grid)} linears stayed off their 4-bit grid at 8 bits")
    return data
