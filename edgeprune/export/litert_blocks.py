"""Exact 4-bit codes for LiteRT's blockwise linears whose float weights already lie on a 4-bit grid.

ai-edge-quantizer's symmetric blockwise scheme takes a block's scale as max|w| / 7 and rounds every weight to it
(ai_edge_quantizer/algorithms/uniform_quantize/uniform_quantize_tensor.py). The symmetric part of an asymmetric
block (edgeprune/quantize/block_offsets.py) holds d·k with k in −8..7 and its minimum at −8·d: its exact codes are
k at the scale d = max|w| / 8, which that rule never picks (or max|w| / m for a block whose codes stop short of −8,
as GPTQ's may: `block_offsets.block_codes`). So after quantizing, every blockwise 4-bit weight of a
FULLY_CONNECTED is rewritten from its float original: codes k, scale d (rounded to bfloat16, as the quantizer
stores its own: XNNPACK's blockwise kernels read bf16 scales). The byte layout stays the quantizer's: signed
codes two to a byte, the first in the low nibble, one fp16 scale per block, rows × blocks.

A weight the converter changed is no longer on the grid (one of MiniLM's query weights came out named after the
embedding LayerNorm as well, a constant folded into it): its op's scope is returned, for the caller to quantize it
another way.
"""

import ml_dtypes
import numpy as np

from edgeprune.errors import VerificationError
from edgeprune.quantize.block_offsets import GRID_TOLERANCE, block_codes, pack_int4

BLOCK = 32  # ai-edge-quantizer's dynamic_wi4b32: 32 input columns per scale


def rewrite_block_codes(quantized: bytes, float_model: bytes) -> tuple[bytes, int, list[str]]:
    """`quantized` (ai-edge-quantizer's output for `float_model`) with every INT4 blockwise FULLY_CONNECTED weight
    whose float original lies on a 4-bit grid re-coded exactly; how many weights were rewritten; and the scopes (as
    ai-edge-quantizer names them) of the ops whose weights were off the grid, left as the quantizer coded them.
    FULLY_CONNECTED ops are paired in order: the quantizer keeps a subgraph's operators in order and adds none of
    them (only DEQUANTIZE ops, tensors and buffers)."""
    from ai_edge_litert import schema_py_generated as schema

    data = bytearray(quantized)
    out_model = schema.Model.GetRootAs(data, 0)
    in_model = schema.Model.GetRootAs(float_model, 0)
    if out_model.SubgraphsLength() != in_model.SubgraphsLength():
        raise VerificationError("the quantized model has other subgraphs than its float source")
    done: set[int] = set()  # buffers, which the prefill and decode subgraphs share
    off_grid: list[str] = []
    for index in range(out_model.SubgraphsLength()):
        graph, source = out_model.Subgraphs(index), in_model.Subgraphs(index)
        quantized_linears, float_linears = fully_connected(out_model, graph), fully_connected(in_model, source)
        if len(quantized_linears) != len(float_linears):
            raise VerificationError("the quantizer changed the linears of its float source")
        for operator, original_operator in zip(quantized_linears, float_linears, strict=True):
            weight = graph.Tensors(operator.Inputs(1))
            if weight.Type() != schema.TensorType.INT4 or weight.Buffer() in done:
                continue
            done.add(weight.Buffer())
            original = source.Tensors(original_operator.Inputs(1))
            shape = tuple(weight.Shape(i) for i in range(weight.ShapeLength()))
            floats = np.frombuffer(tensor_bytes(in_model, float_model, original), np.float32)
            try:
                codes, scales = exact_codes(floats.reshape(shape), weight.Name().decode(errors="replace"))
            except VerificationError:
                off_grid.append(op_scope(graph, operator))
                continue
            details = weight.Quantization().Details()
            blockwise = schema.BlockwiseQuantization()
            blockwise.Init(details.Bytes, details.Pos)
            write_tensor(out_model, data, weight, pack_int4(codes))
            write_tensor(out_model, data, graph.Tensors(blockwise.Scales()),
                         scales.astype(ml_dtypes.bfloat16).astype(np.float16).tobytes())
    return bytes(data), len(done) - len(off_grid), off_grid


def fully_connected(model, graph) -> list:  # noqa: ANN001 - flatbuffer tables
    """`graph`'s FULLY_CONNECTED operators, in order."""
    from ai_edge_litert import schema_py_generated as schema

    found = []
    for position in range(graph.OperatorsLength()):
        operator = graph.Operators(position)
        code = model.OperatorCodes(operator.OpcodeIndex())
        if max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) == schema.BuiltinOperator.FULLY_CONNECTED:
            found.append(operator)
    return found


def op_scope(graph, operator) -> str:  # noqa: ANN001 - flatbuffer tables
    """The name ai-edge-quantizer's rules match an op by: its outputs' names, each followed by ";"."""
    names = [graph.Tensors(operator.Outputs(i)).Name().decode(errors="replace")
             for i in range(operator.OutputsLength()) if operator.Outputs(i) >= 0]
    return "".join(f"{name};" for name in names if name)


def exact_codes(weight: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes (−8..7, int8) and scales (rows × blocks) that represent `weight` [rows, cols] exactly."""
    try:
        return block_codes(weight, BLOCK, GRID_TOLERANCE)
    except ValueError as error:
        raise VerificationError(f"litert-int4: weight {name!r} is {error}") from None


def buffer_span(model, data: bytes | bytearray, tensor) -> tuple[int, int]:  # noqa: ANN001 - flatbuffer tables
    """Where `tensor`'s bytes lie in the file: past the flatbuffer at an offset (large models), or inside it."""
    buffer = model.Buffers(tensor.Buffer())
    if buffer.Offset() > 1:
        return buffer.Offset(), buffer.Size()
    inline = buffer.DataAsNumpy()  # a view into `data`
    start = inline.__array_interface__["data"][0] - np.frombuffer(data, np.uint8).__array_interface__["data"][0]
    return start, inline.size


def tensor_bytes(model, data: bytes | bytearray, tensor) -> bytes:  # noqa: ANN001 - flatbuffer tables
    start, size = buffer_span(model, data, tensor)
    return bytes(data[start:start + size])


def write_tensor(model, data: bytearray, tensor, payload: bytes) -> None:  # noqa: ANN001 - flatbuffer tables
    start, size = buffer_span(model, data, tensor)
    if size != len(payload):
        raise VerificationError(f"tensor {tensor.Name()!r} holds {size} bytes, not the {len(payload)} rewritten")
    data[start:start + size] = payload
