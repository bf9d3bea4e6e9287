"""ExecuTorch with the XNNPACK delegate: `.pte` programs run by the ExecuTorch Python runtime."""

import os
from pathlib import Path

import torch
from torch import nn

from edgeprune.export.base import DeviceRuntime, RunArtifact
from edgeprune.quantize.recipes import Recipe

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

    def lower(self, module: nn.Module, example_inputs: tuple[torch.Tensor, ...], recipe: Recipe) -> bytes:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        module.eval()  # not chained: a PT2E-converted module's eval() returns None
        program = torch.export.export(module, example_inputs, strict=False)
        lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        return lowered.to_executorch().buffer

    def load(self, path: Path, threads: int | None = None) -> RunArtifact:
        return ExecutorchProgram(path, threads)
