"""ExecuTorch export with the XNNPACK delegate, and the Python runtime that runs the `.pte`."""

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from edgeprune.serialization import write_bytes_atomic

_threadpool_size: int | None = None


@dataclass
class ExportedArtifact:
    path: Path
    size_bytes: int
    export_seconds: float
    cached: bool


def lower_to_pte(module: nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    program = torch.export.export(module.eval(), example_inputs, strict=False)
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    return lowered.to_executorch().buffer


def content_key(module: nn.Module, recipe: str, example_inputs: tuple[torch.Tensor, ...]) -> str:
    """Hash of every weight, the recipe and the input signature: same key, same artifact."""
    digest = hashlib.sha256(f"executorch-xnnpack|{recipe}".encode())
    for shape_dtype in ((tuple(t.shape), str(t.dtype)) for t in example_inputs):
        digest.update(repr(shape_dtype).encode())
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(repr((tuple(tensor.shape), str(tensor.dtype))).encode())
        digest.update(tensor.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def export_executorch(
    module: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    path: Path,
    cache_dir: Path | None = None,
    cache_key: str | None = None,
) -> ExportedArtifact:
    """Lower `module` to `path` (written atomically); reuse a cached export with the same key."""
    start = time.perf_counter()
    cached_file = cache_dir / f"{cache_key}.pte" if cache_dir is not None and cache_key else None
    if cached_file is not None and cached_file.exists():
        data = cached_file.read_bytes()
        cached = True
    else:
        data = lower_to_pte(module, example_inputs)
        cached = False
        if cached_file is not None:
            write_bytes_atomic(cached_file, data)
    write_bytes_atomic(path, data)
    return ExportedArtifact(Path(path), len(data), time.perf_counter() - start, cached)


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
