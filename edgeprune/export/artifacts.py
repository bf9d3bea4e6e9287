"""Export a module with a recipe to its runtime's artifact: written atomically, cached by content."""

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from edgeprune.cache import read_entry, write_entry
from edgeprune.errors import UserInputError, VerificationError
from edgeprune.export.base import HEAD_BYTES, RunArtifact
from edgeprune.export.verify import Verification, compare_artifact, rejection
from edgeprune.progress import library_output_hidden
from edgeprune.quantize.recipes import RECIPES, Recipe, any_recipe
from edgeprune.runtimes import RUNTIMES, runtime_for_suffix
from edgeprune.serialization import to_jsonable, write_bytes_atomic


@dataclass
class ExportedArtifact:
    path: Path
    runtime: str
    recipe: str
    size_bytes: int
    export_seconds: float
    cached: bool


@dataclass
class VerifiedArtifact(ExportedArtifact):
    """An artifact run on real inputs and compared with its quantized PyTorch source (`export(verify_on=...)`)."""

    verification: Verification

    @property
    def accepted(self) -> bool:
        return self.verification.passed


@dataclass
class ExportJob:
    """An export to run somewhere else (another process or machine) into the content-keyed export cache: the float
    module, its example inputs, the recipe and calibration inputs; `cache_file` is where its bytes belong
    (`edgeprune.search.build_job.BuildJob` runs it with verification and evaluation)."""

    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    recipe: Recipe
    calibration: list[tuple[torch.Tensor, ...]] | None
    cache_file: Path


def content_key(module: nn.Module, recipe: str | Recipe, example_inputs: tuple[torch.Tensor, ...],
                calibration: Sequence[tuple[torch.Tensor, ...]] | None = None) -> str:
    """Hash of every weight (of the float module), the recipe's whole configuration, the input signature and, for a
    recipe that calibrates, the calibration inputs themselves (other data, other artifact).

    Every setting of the recipe is in the key (its group size, tolerance, formats...), not only its name, so a recipe
    changed under the same name misses the cache; the exporters' versions are checked by the entry's cache record.
    """
    settings = recipe_settings(any_recipe(recipe) if isinstance(recipe, str) else recipe)
    # what shapes a generator's program beside its weights (its cache length and attention path: the KV buffers are
    # not in the state_dict)
    options = module.program_options() if hasattr(module, "program_options") else {}
    # the leading version changes with what an exporter writes for the same inputs (v5: LiteRT generators fuse their
    # projections, litert-int4's offsets are int8), so that a cached file of an older layout is not served
    digest = hashlib.sha256(f"v5|{settings}|{json.dumps(options, sort_keys=True)}".encode())
    for shape_dtype in ((tuple(t.shape), str(t.dtype)) for t in example_inputs):
        digest.update(repr(shape_dtype).encode())
    for tensor in (t for batch in calibration or () for t in batch):
        digest.update(tensor.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    for name, tensor in module.state_dict().items():
        digest.update(name.encode())
        digest.update(repr((tuple(tensor.shape), str(tensor.dtype))).encode())
        digest.update(tensor.detach().contiguous().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:32]


def recipe_settings(recipe: Recipe) -> str:
    """The recipe's configuration as canonical JSON, its prose description left out (it changes no byte)."""
    return json.dumps({k: v for k, v in to_jsonable(recipe).items() if k != "description"}, sort_keys=True)


def export(
    module: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    path: Path,
    recipe: str | Recipe = "fp32",
    cache_dir: Path | None = None,
    cache_key: str | None = None,
    calibration: Sequence[tuple[torch.Tensor, ...]] | None = None,
    *,
    verify_on: Sequence[tuple[torch.Tensor, ...]] | None = None,
    name: str | None = None,
    keep_rejected: bool = False,
) -> ExportedArtifact:
    """Quantize `module` by `recipe`, lower it for the recipe's runtime and write it to `path`: the export stage.

    With `cache_dir`, an identical earlier export is reused (one that does not match its cache record is one
    warning, and exported again: `edgeprune.cache`); `cache_key` defaults to `content_key` of the module, recipe,
    example and calibration.
    `calibration`: real inputs for recipes that calibrate (`Recipe.needs_calibration`); pass the same inputs to
    `content_key` for `cache_key`, so that other calibration data is another artifact.
    With `verify_on` (real inputs, as the artifact takes them) the artifact is run on each and compared with the
    quantized module, and a `VerifiedArtifact` is returned; one outside the recipe's tolerance is removed and
    raises VerificationError (`name` says which artifact), unless `keep_rejected`, which keeps and returns it
    (`accepted` False) for a measurement that wants rejected recipes too.
    """
    recipe = RECIPES.get(recipe) if isinstance(recipe, str) else recipe
    RUNTIMES.get(recipe.runtime).require()  # before recipe.apply, which may need the runtime's quantizer
    if recipe.calibrated and hasattr(module, "program_spec") and module.program_spec(example_inputs) is not None:
        # PT2E calibrates one traced forward; a generator's forward writes a cache it holds or takes as state
        raise UserInputError(f"{recipe.name} calibrates a single forward and cannot quantize a KV-cached generator; "
                             "take a recipe quantized without calibration")
    if cache_dir is not None and cache_key is None:
        cache_key = content_key(module, recipe, example_inputs, calibration)
    cached_file = cache_file(recipe, cache_dir, cache_key)
    # a cache hit needs no quantized module, unless it is verified; calibrating costs a pass over every input
    if cached_file is not None and verify_on is None:
        start = time.perf_counter()
        data = read_entry(cached_file, producers=export_producers(recipe.runtime))
        if data is not None:
            write_bytes_atomic(Path(path), data)
            return ExportedArtifact(Path(path), recipe.runtime, recipe.name, len(data), time.perf_counter() - start,
                                    True)
    with library_output_hidden():
        prepared = recipe.apply(module, calibration)
    artifact = export_prepared(prepared, example_inputs, path, recipe, cache_dir, cache_key)
    if verify_on is None:
        return artifact
    verification = compare_artifact(prepared, load_artifact(artifact.path), verify_on, recipe.min_cosine)
    if not verification.passed and not keep_rejected:
        artifact.path.unlink(missing_ok=True)  # a rejected artifact is not left looking like a good one
        raise rejection(verification, name or str(path))
    return VerifiedArtifact(**vars(artifact), verification=verification)


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
    runtime.require()
    start = time.perf_counter()
    cached_file = cache_file(recipe, cache_dir, cache_key)
    data = read_entry(cached_file, producers=export_producers(recipe.runtime)) if cached_file is not None else None
    cached = data is not None
    if data is None:
        with library_output_hidden():  # the converters' own stage lines and C++ logs
            data = runtime.program.lower(prepared, example_inputs, recipe)
        if cached_file is not None:
            write_entry(cached_file, data, export_producers(recipe.runtime))
    write_bytes_atomic(Path(path), data)
    return ExportedArtifact(Path(path), recipe.runtime, recipe.name, len(data), time.perf_counter() - start, cached)


def cache_file(recipe: Recipe, cache_dir: Path | None, cache_key: str | None) -> Path | None:
    """Where the export cache keeps the artifact of `cache_key` (None: no cache)."""
    if cache_dir is None or not cache_key:
        return None
    return Path(cache_dir) / f"{cache_key}{RUNTIMES.get(recipe.runtime).suffix}"


def export_producers(runtime: str) -> tuple[str, ...]:
    """The packages whose versions an export's cache record names, and that must match for it to be reused: torch
    and the runtime's (an artifact lowered by another ExecuTorch may not load in this one)."""
    return ("torch", *RUNTIMES.get(runtime).packages.values())


def runtime_of(path: Path) -> str | None:
    """The runtime whose artifacts end in `path`'s suffix, or None."""
    return runtime_for_suffix(Path(path).suffix)


def check_artifact(path: Path, runtime: str | None = None) -> str:
    """Refuse an artifact file before it is copied or run: exit 2 when it is missing or of no known type, exit 4
    (VerificationError) when it is empty, of another format, cut off or malformed. Returns its runtime's name.

    Nothing is run: ExecuTorch programs are checked against the sizes in their header, LiteRT models by the
    interpreter's flatbuffer verifier.
    """
    path = Path(path)
    name = runtime or runtime_of(path)
    if name is None:
        raise UserInputError(f"cannot tell the runtime of {path}; pass --runtime {'|'.join(RUNTIMES.names())}")
    expected = RUNTIMES.get(name)
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except FileNotFoundError:
        raise UserInputError(f"artifact {path} does not exist") from None
    except IsADirectoryError:
        raise UserInputError(f"artifact {path} is a folder, not {expected.title}") from None
    except OSError as error:
        raise UserInputError(f"cannot read artifact {path}: {error.strerror or error}") from None
    if size == 0:
        raise VerificationError(f"{path} is empty, not {expected.title}; export or copy it again")
    if not expected.is_own(head):
        other = next((RUNTIMES.get(n) for n in RUNTIMES if RUNTIMES.get(n).is_own(head)), None)
        hint = (f"it is {other.title}: pass --runtime {other.name} or name it *{other.suffix}" if other else
                f"it starts with {head[:16]!r}")
        raise VerificationError(f"{path} is not {expected.title} ({hint})")
    expected.require()
    expected.program.check_file(path, head, size)
    return name


def load_artifact(path: Path, threads: int | None = None) -> RunArtifact:
    """Run an artifact by its file type: `.pte` with ExecuTorch, `.tflite` with LiteRT; a file its runtime cannot
    load is a VerificationError (exit 4)."""
    path = Path(path)
    name = runtime_of(path)
    if name is None:
        raise ValueError(f"{path}: unknown artifact type; expected one of .pte, .tflite")
    runtime = RUNTIMES.get(name)
    runtime.require()
    try:
        with library_output_hidden():  # ExecuTorch's cpuinfo probes, LiteRT's delegate lines
            return runtime.program.load(path, threads)
    except (RuntimeError, ValueError) as error:
        message = " ".join(str(error).split())
        raise VerificationError(f"{runtime.name} cannot load {path} ({message}); export it again") from None
