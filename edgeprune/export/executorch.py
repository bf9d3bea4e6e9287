"""ExecuTorch with the XNNPACK delegate: `.pte` programs run by the ExecuTorch Python runtime."""

import os
from pathlib import Path

import torch
from torch import nn

from edgeprune.errors import VerificationError
from edgeprune.export.base import DeviceRuntime, RunArtifact
from edgeprune.export.program_facts import ProgramFacts, RuntimeInfo, TensorSpec, package_version
from edgeprune.export.quant_op_shapes import quant_op_shapes_cached
from edgeprune.generation.fast_attention import load_custom_ops
from edgeprune.generation.program import ProgramSpec
from edgeprune.progress import library_output_hidden
from edgeprune.quantize.recipes import Recipe
from edgeprune.runtimes.executorch import EXECUTORCH

EXTENDED_HEADER = b"eh00"  # after the identifier: program size, segment offset and segment size (little-endian)
# ExecuTorch's ScalarType codes (executorch/exir/scalar_type.py) by numpy's names
SCALAR_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32", 7: "float64",
                11: "bool", 15: "bfloat16"}

_threadpool_size: int | None = None


def set_threadpool_once(threads: int) -> None:
    """Size XNNPACK's pool before the first program loads; resizing after a load crashed (REFERENCE.md)."""
    global _threadpool_size
    if _threadpool_size is None:
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

        _unsafe_reset_threadpool(threads)
        _threadpool_size = threads


class ExecutorchProgram:
    """A loaded `.pte` whose `forward` takes and returns torch tensors."""

    def __init__(self, path: Path, threads: int | None = None) -> None:
        from executorch.runtime import Runtime

        set_threadpool_once(threads or os.cpu_count() or 1)
        self.path = Path(path)
        self._program = Runtime.get().load_program(str(self.path))
        if "use_sdpa_with_kv_cache" in self._program.method_names:
            # a generator on ExecuTorch's LLM kernels (fast attention): their library loads before its method
            if bool(list(self._program.load_method("use_sdpa_with_kv_cache").execute([]))[0]):
                load_custom_ops()
        self._method = self._program.load_method("forward")

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        return list(self._method.execute(list(inputs)))

    def constants(self) -> dict[str, object]:
        """The program's constant methods, by name: the metadata a generator carries for ExecuTorch's LLM runner."""
        return program_constants(self._program)


def program_constants(program: object) -> dict[str, object]:
    """The constant methods (methods without inputs returning one value or a list) of a loaded
    `executorch.runtime` Program, by name."""
    values: dict[str, object] = {}
    for name in sorted(program.method_names - {"forward"}):  # type: ignore[attr-defined]
        if program.metadata(name).num_inputs() == 0:  # type: ignore[attr-defined]
            result = list(program.load_method(name).execute([]))  # type: ignore[attr-defined]
            values[name] = result[0] if len(result) == 1 else result
    return values


class ExecutorchRuntime(DeviceRuntime):
    spec = EXECUTORCH

    def check_file(self, path: Path, head: bytes, size: int) -> None:
        """The sizes the extended header states against the file's: what the runtime checks first when it loads."""
        if head[8:12] != EXTENDED_HEADER or len(head) < 32:
            super().check_file(path, head, size)
            return
        length = int.from_bytes(head[12:16], "little")
        program_size = int.from_bytes(head[16:24], "little")
        segment_base = int.from_bytes(head[24:32], "little")
        segment_size = int.from_bytes(head[32:40], "little") if length > 24 and len(head) >= 40 else 0
        expected = segment_base + segment_size if segment_size else max(program_size, segment_base)
        if length < 24 or program_size < 16 or int.from_bytes(head[0:4], "little") >= program_size:
            raise VerificationError(f"{path} is not {self.title}: its header is malformed; export it again")
        if size < expected:
            raise VerificationError(f"{path} is cut off: {size} bytes of the {expected} its header states; copy or "
                                    "export it again")

    def lower(self, module: nn.Module, example_inputs: tuple[torch.Tensor, ...], recipe: Recipe) -> bytes:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

        module.eval()  # not chained: a PT2E-converted module's eval() returns None
        spec = module.program_spec(example_inputs) if hasattr(module, "program_spec") else None
        if spec is None:
            program = torch.export.export(module, example_inputs, strict=False)
            # the Edge dialect verifier re-checks every node after each pass: 7 % of a small BERT's fp32 lowering and
            # 12 % of its int8 one (docs/FINDINGS.md, 2026-12-07); an operator the runtime lacks still fails the
            # export, when the program is loaded to be verified. torchao's quantize ops take their output shapes from
            # a cache instead of replaying their bodies in every pass: MiniLM's int8 lowering 1.53x faster, the same
            # bytes (edgeprune/export/quant_op_shapes.py)
            with quant_op_shapes_cached():
                lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()],
                                                      compile_config=EdgeCompileConfig(_check_ir_validity=False))
                return lowered.to_executorch().buffer
        return lower_stateful(module, example_inputs, spec)

    def load(self, path: Path, threads: int | None = None) -> RunArtifact:
        return ExecutorchProgram(path, threads)

    def inspect(self, path: Path) -> ProgramFacts:
        """Inputs and outputs from the runtime's method metadata; operators and delegates from the program's
        flatbuffer (its execution plan's operator and delegate tables)."""
        from executorch.runtime import Runtime

        try:
            with library_output_hidden():  # the runtime's cpuinfo probes on first use
                program = Runtime.get().load_program(str(path))
            method = "forward" if "forward" in program.method_names else sorted(program.method_names)[0]
            meta = program.metadata(method)
            inputs = [_tensor_spec(meta.input_tensor_meta(i), f"input_{i}") for i in range(meta.num_inputs())]
            outputs = [_tensor_spec(meta.output_tensor_meta(i), f"output_{i}") for i in range(meta.num_outputs())]
            constants = program_constants(program)
        except (RuntimeError, ValueError, IndexError) as error:
            message = " ".join(str(error).split())
            raise VerificationError(f"executorch cannot read {path} ({message}); export it again") from None
        version, operators, delegates = read_execution_plan(Path(path).read_bytes(), method)
        return ProgramFacts(RuntimeInfo(self.name, "executorch", package_version("executorch"), version), method,
                            inputs, outputs, operators, delegates, constants=constants,
                            notes=["operators: the kernels the program calls outside its delegates; an app's "
                                   "runtime must link them and the delegates' backends"])


def lower_stateful(module: nn.Module, example_inputs: tuple[torch.Tensor, ...], spec: ProgramSpec) -> bytes:
    """A program with dynamic input lengths, buffers it mutates in place (a KV cache: memory-planned, not stored
    in the file, kept between calls of one loaded method) and constant metadata methods; optimum-executorch's
    recipe for LLMs (the passes size memory from the dynamic bounds, graph inputs are not planned)."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass

    # in-place cache writes next to parameters that require grad fail functionalization ("a leaf Variable that
    # requires grad is being used in an in-place operation")
    with torch.no_grad():
        module.requires_grad_(False)
        program = torch.export.export(module, example_inputs, dynamic_shapes=spec.dynamic_shapes, strict=False)
        forget_provenance(program.graph_module)
        with quant_op_shapes_cached():  # SmolLM2's int4-decoder-all lowered 1.29x faster (quant_op_shapes.py)
            lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()],
                                                  compile_config=EdgeCompileConfig(_check_ir_validity=False),
                                                  constant_methods=dict(spec.metadata))
            forget_provenance(lowered.exported_program().graph_module)
            config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False),
                                             sym_shape_eval_pass=ConstraintBasedSymShapeEvalPass())
            return lowered.to_executorch(config).buffer


def forget_provenance(graph_module: torch.fx.GraphModule) -> None:
    """Drop every node's `from_node` record (which pass made it from which node), here and in lowered delegates.
    Each pass deep-copies the whole chain into the nodes it makes, and to_executorch runs every delegate's program
    under fake tensors, copying it again: on SmolLM2 with 4-bit linears the chain made one export take over ten
    minutes. Nothing the program runs depends on it."""
    for module in graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in graph.nodes if isinstance(graph, torch.fx.Graph) else ():
            node.meta.pop("from_node", None)
        original = getattr(module, "original_module", None)  # a LoweredBackendModule keeps its source program
        if original is not None and hasattr(original, "graph_module"):
            forget_provenance(original.graph_module)


def _tensor_spec(info: object, name: str) -> TensorSpec:
    code = int(info.dtype())  # type: ignore[attr-defined] - a pybind TensorInfo
    return TensorSpec(name, [int(size) for size in info.sizes()],  # type: ignore[attr-defined]
                      SCALAR_TYPES.get(code, f"scalar type {code}"))


def read_execution_plan(data: bytes, method: str) -> tuple[int, list[str], list[str]]:
    """(program version, operator names, delegate ids) of `method`'s execution plan, read from the flatbuffer by the
    field order of executorch/exir/_serialize/program.fbs (Program.version, .execution_plan; ExecutionPlan.name,
    .operators, .delegates; Operator.name, .overload; BackendDelegate.id)."""
    from flatbuffers.number_types import Uint32Flags
    from flatbuffers.table import Table

    def field(index: int) -> int:  # a table field's slot in its vtable
        return 4 + 2 * index

    def tables(parent: Table, index: int) -> list[Table]:
        offset = parent.Offset(field(index))
        if not offset:
            return []
        start = parent.Vector(offset)
        return [Table(parent.Bytes, parent.Indirect(start + 4 * j)) for j in range(parent.VectorLen(offset))]

    def text(table: Table, index: int) -> str:
        offset = table.Offset(field(index))
        return table.String(offset + table.Pos).decode() if offset else ""

    buffer = bytearray(data)
    program = Table(buffer, int.from_bytes(data[0:4], "little"))
    version_offset = program.Offset(field(0))
    version = program.Get(Uint32Flags, version_offset + program.Pos) if version_offset else 0
    plans = tables(program, 1)
    plan = next((p for p in plans if text(p, 0) == method), plans[0] if plans else None)
    if plan is None:
        return version, [], []
    operators = sorted({f"{text(op, 0)}.{text(op, 1)}" if text(op, 1) else text(op, 0) for op in tables(plan, 6)})
    delegates = sorted({text(delegate, 0) for delegate in tables(plan, 7)})
    return version, operators, delegates
