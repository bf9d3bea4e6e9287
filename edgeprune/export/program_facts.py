"""What a runtime artifact says about itself: its inputs and outputs, operators and delegates, read from the file
and its runtime (never restated from what edgeprune meant to export)."""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TensorSpec:
    """One input or output of a program, as its runtime takes or returns it."""

    name: str  # what an app calls it (input_ids, logits); the runtime's own name where nobody named it
    shape: list[int]
    dtype: str  # numpy's name: float32, int64, int32, int8, ...
    runtime_name: str | None = None  # LiteRT's signature key (args_0, output_0); None: ExecuTorch passes by position
    quantization: list[float] | None = None  # [scale, zero point] when an integer tensor stands for real values
    value_range: list[float] | None = None  # smallest and largest value the task's data gives it (inputs of a fit)
    meaning: str = ""


@dataclass
class RuntimeInfo:
    name: str  # edgeprune's name of the runtime: executorch, litert
    package: str  # the Python package that read (and runs) the artifact here
    version: str  # that package's version
    schema_version: int | None = None  # the flatbuffer's own version field (ExecuTorch Program, LiteRT Model)


@dataclass
class ProgramFacts:
    """Everything `DeviceRuntime.inspect` reads from one artifact."""

    runtime: RuntimeInfo
    method: str  # the entry point: ExecuTorch's method name, LiteRT's signature key
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    operators: list[str]  # ExecuTorch: kernels the program calls outside its delegates; LiteRT: the op codes
    delegates: list[str]  # backends that run (parts of) the program
    notes: list[str] = field(default_factory=list)  # how the delegates were found, what could not be read
    constants: dict[str, Any] = field(default_factory=dict)  # the program's constant methods (a generator's metadata)


def package_version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"
