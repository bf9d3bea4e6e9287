"""Export a module with a recipe to its runtime's artifact: written atomically, cached by content."""

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from edgeprune.export.base import DeviceRuntime, RunArtifact
from edgeprune.export.executorch import ExecutorchRuntime
from edgeprune.export.litert import LiteRTRuntime
from edgeprune.quantize.recipes import RECIPES, Recipe
from edgeprune.registry import Registry
from edgeprune.serialization import write_bytes_atomic

RUNTIMES: Registry[DeviceRuntime] = Registry("runtime")
RUNTIMES.register("executorch")(ExecutorchRuntime())
RUNTIMES.register("litert")(LiteRTRuntime())


@dataclass
class ExportedArtifact:
    path: Path
    runtime: str
    recipe: str
    size_bytes: int
    export_seconds: float
    cached: bool


def content_key(module: nn.Module, recipe: str, example_inputs: tuple[torch.Tensor, ...]) -> str:
    """Hash of every weight (of the float module), the recipe and the input signature."""
    digest = hashlib.sha256(f"v2|{recipe}".encode())
    for shape_dtype in ((tuple(t.shape), str(t.dtype)) for t in example_inputs):
        digest.update(repr(shape_dtype).encode())
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(repr((tuple(tensor.shape), str(tensor.dtype))).encode())
        digest.update(tensor.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def export(
    module: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    path: Path,
    recipe: str | Recipe = "fp32",
    cache_dir: Path | None = None,
    cache_key: str | None = None,
    calibration: Sequence[tuple[torch.Tensor, ...]] | None = None,
) -> ExportedArtifact:
    """Quantize `module` by `recipe`, lower it for the recipe's runtime and write it to `path`.

    With `cache_dir` and `cache_key` (see `content_key`), an identical earlier export is reused.
    `calibration`: real inputs for calibrated recipes (`Recipe.calibrated`); include the calibration data's
    identity in `cache_key` when it can change for the same weights.
    """
    recipe = RECIPES.get(recipe) if isinstance(recipe, str) else recipe
    suffix = RUNTIMES.get(recipe.runtime).suffix
    cache_hit = cache_dir is not None and cache_key is not None and (Path(cache_dir) / f"{cache_key}{suffix}").exists()
    # a cache hit needs no quantized module; calibrating one costs a pass over every calibration input
    prepared = module if cache_hit else recipe.apply(module, calibration)
    return export_prepared(prepared, example_inputs, path, recipe, cache_dir, cache_key)


def export_prepared(
    prepared: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    path: Path,
    recipe: Recipe,
    cache_dir: Path | None = None,
    cache_key: str | None = None,
) -> ExportedArtifact:
    """`export` for a module that `recipe.apply` already produced (keep it to verify the artifact)."""
    runtime = RUNTIMES.get(recipe.runtime)
    start = time.perf_counter()
    cached_file = cache_dir / f"{cache_key}{runtime.suffix}" if cache_dir is not None and cache_key else None
    if cached_file is not None and cached_file.exists():
        data, cached = cached_file.read_bytes(), True
    else:
        data, cached = runtime.lower(prepared, example_inputs, recipe), False
        if cached_file is not None:
            write_bytes_atomic(cached_file, data)
    write_bytes_atomic(Path(path), data)
    return ExportedArtifact(Path(path), recipe.runtime, recipe.name, len(data), time.perf_counter() - start, cached)


def load_artifact(path: Path, threads: int | None = None) -> RunArtifact:
    """Run an artifact by its file type: `.pte` with ExecuTorch, `.tflite` with LiteRT."""
    path = Path(path)
    for name in RUNTIMES:
        runtime = RUNTIMES.get(name)
        if path.suffix == runtime.suffix:
            return runtime.load(path, threads)
    raise ValueError(f"{path}: unknown artifact type; expected one of .pte, .tflite")
