"""One descriptor per device runtime that owns everything edgeprune knows about it: its file type, its pip extra,
its recipe ladder, what its files carry besides weights, its native benchmark tool, what a board installs for it,
how its version is probed and how an app runs its artifact. The heavy part (lowering, loading, inspecting files:
`edgeprune.export.base.DeviceRuntime`) is named here and imported on first use, so that the descriptors stay
free of torch: the CLI's light verbs and device profiles read them without it.

A new runtime is one module that registers its descriptor in RUNTIMES (as edgeprune/runtimes/executorch.py does),
named in the `edgeprune.runtimes` entry-point group of its package (edgeprune.plugins), and its DeviceRuntime
implementation."""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from importlib import import_module
from typing import Any

from edgeprune.extras import EXTRAS, require_extra
from edgeprune.plugins import RUNTIMES_GROUP
from edgeprune.registry import Registry


def load_named(path: str) -> Any:
    """The object a "package.module:attribute" path names, imported now."""
    module, _, attribute = path.partition(":")
    return getattr(import_module(module), attribute)


@dataclass(frozen=True)
class BoardPackages:
    """What a runtime needs on a board. `with_deps` install with their dependencies; `without_deps` alone:
    executorch's own requirements are its export tool chain (coremltools, pandas, scikit-learn...), not
    what its runtime imports, and torch's aarch64 wheel on PyPI requires CUDA packages the CPU never loads."""

    with_deps: tuple[str, ...]
    without_deps: tuple[str, ...] = ()
    imports: str = ""  # the statement that proves the runtime loads
    disk_mb: int = 300  # free space the install needs on the board


@dataclass(frozen=True, eq=False)  # a descriptor: one object per runtime, compared by identity
class RuntimeSpec:
    name: str
    suffix: str  # artifact file extension
    title: str  # what one of its artifacts is called, with its article: "an ExecuTorch program"
    identifier: bytes  # the flatbuffer file identifier, bytes 4 to 8 of every artifact
    extra: str  # the pip extra that installs it (edgeprune.extras lists what each provides); "" for none
    implementation: str  # "module:Class" of its DeviceRuntime: lowering, loading and inspecting its files
    fp32_recipe: str  # the dense baseline's recipe
    fit_ladder: tuple[str, ...]  # the recipes a fit tries, highest fidelity first, smallest last
    # True: every recipe quantizes the PyTorch module it lowers; False: its recipes quantize the converted file, so
    # their PyTorch source stays float unless the recipe is calibrated (LiteRT's ai-edge-quantizer)
    quantizes_in_pytorch: bool
    pt2e_quantizer: str  # "module:function" giving the PT2E quantizer of its calibrated static int8 recipe
    folds_quantized_weights: bool  # whether PT2E's convert may fold each weight's quantize op into an int8 constant
    row_parameter_bytes: int  # quantization parameters per output row of an int8 matrix (size model)
    group_scale_bytes: int  # bytes of each 4-bit group's scale (size model)
    native_tool: str  # the device profile's key for the path of its native benchmark tool
    setup_builds_native_tool: bool  # `edgeprune devices setup` builds that tool on a board
    board_packages: BoardPackages  # what a board installs to time its files in Python
    # what a board installs when the native tool times its files (None: the tool is a download of its own)
    native_board_packages: BoardPackages | None
    probe_distributions: tuple[str, ...]  # the distributions whose version says it is installed, first found wins
    usage_imports: tuple[str, ...]  # the lines of the app snippet (USAGE.md) that import it
    usage_run: tuple[str, ...]  # the lines that run `spec["artifact"]` on `arrays` and set `first`
    # a module the benchmark pushes beside the device's runner.py, whose `runner(artifact, inputs, threads)` times
    # its files there (a generator: runtime ready, then a zero-argument run); "" when runner.py has one (built-ins)
    device_runner: str = ""
    # a KV-cached generator in the app snippet: lines defining `forward(ids, start)` (logits of the token ids `ids`
    # at positions start.. as a numpy array, the cache kept between calls); () when the runtime builds no generators
    usage_generator: tuple[str, ...] = ()
    usage_llm_kernels: tuple[str, ...] = ()  # the lines that load the fast attention's kernels before the program
    # a standalone module pushed to a device and run by its Python to generate with this runtime's generators (the
    # native ExecuTorch runner's --generate command line and log: edgeprune/generation/native.py); "": its native
    # tool generates
    device_generator: str = ""
    # whether one weight used by two matrices (a decoder's embedding table tied to its output layer) is stored once
    # (size model); ExecuTorch stores it twice, LiteRT's converter once
    stores_tied_weights_once: bool = False

    @property
    def packages(self) -> dict[str, str]:
        """What its extra provides: import name → distribution name (none for a runtime without an extra of
        edgeprune's, such as a third party's that its own package brings)."""
        return EXTRAS.get(self.extra, {})

    @cached_property
    def program(self) -> Any:
        """Its DeviceRuntime (edgeprune.export.base), imported on first use."""
        return load_named(self.implementation)()

    def require(self) -> None:
        """Refuse, in one line naming the pip extra, when this runtime's packages are not installed here."""
        if self.extra in EXTRAS:
            require_extra(self.extra, f"the {self.name} runtime")

    def is_own(self, head: bytes) -> bool:
        """Whether a file starting with `head` carries this runtime's file identifier."""
        return len(head) >= 8 and head[4:8] == self.identifier


RUNTIMES: Registry[RuntimeSpec] = Registry("runtime", plugins=RUNTIMES_GROUP)


def runtime_for_suffix(suffix: str) -> str | None:
    """The runtime whose artifacts end in `suffix` (".pte"), or None."""
    return next((name for name in RUNTIMES if RUNTIMES.get(name).suffix == suffix), None)


class EachRuntime(Mapping):
    """One attribute of every registered runtime's descriptor, by runtime name, read when asked: a module-level table
    built at import would read RUNTIMES while a runtime's plugin module may still be importing the very module that
    builds it."""

    def __init__(self, attribute: str) -> None:
        self.attribute = attribute

    def __getitem__(self, name: str) -> Any:
        if name not in RUNTIMES:
            raise KeyError(name)
        return getattr(RUNTIMES.get(name), self.attribute)

    def __iter__(self) -> Iterator[str]:
        return iter(RUNTIMES)

    def __len__(self) -> int:
        return len(RUNTIMES.names())
