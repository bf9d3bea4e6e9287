"""ExecuTorch with the XNNPACK delegate: `.pte` programs run by the ExecuTorch Python runtime."""

import os
from pathlib import Path

import torch
from torch import nn

from edgeprune.errors import VerificationError
from edgeprune.export.base import DeviceRuntime, RunArtifact
from edgeprune.quantize.recipes import Recipe

EXTENDED_HEADER = b"eh00"  # after the identifier: program size, segment offset and segment size (little-endian)

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
        self._method = Runtime.get().load_program(str(self.path)).load_method("forward")

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        return list(self._method.execute(list(inputs)))


class ExecutorchRuntime(DeviceRuntime):
    name = "executorch"
    suffix = ".pte"
    title = "an ExecuTorch program"
    identifier = b"ET12"
    extra = "executorch"

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
        from executorch.exir import to_edge_transform_and_lower

        module.eval()  # not chained: a PT2E-converted module's eval() returns None
        program = torch.export.export(module, example_inputs, strict=False)
        lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        return lowered.to_executorch().buffer

    def load(self, path: Path, threads: int | None = None) -> RunArtifact:
        return ExecutorchProgram(path, threads)
