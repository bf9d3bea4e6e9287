"""Build the ExecuTorch runner (`edgeprune/bench/native/executor_runner.cpp`) from the `executorch` wheel's own
libraries and headers: on a board over its transport (`devices setup`), or on this host.

The runner is how an app runs a `.pte`: the C++ runtime, its XNNPACK backend and kernels, no torch and no
Python. On a board it is what makes ExecuTorch usable without torch, whose aarch64 wheel on PyPI is a CUDA
build. A build is stamped with a digest of the source, the compile line and the executorch version, so a
second setup finds it in place and builds nothing.
"""

import hashlib
import importlib.util
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from edgeprune.devices.transports.base import Transport
from edgeprune.errors import EdgepruneError, UserInputError

RUNNER_SOURCE = Path(__file__).resolve().parents[1] / "bench" / "native" / "executor_runner.cpp"
# The kernels and the XNNPACK backend register themselves from static initialisers: the runner calls none of
# their symbols, so they are linked with --no-as-needed or a linker that drops unused libraries loses them.
LIBRARIES = ("executorch_backend_xnnpack", "executorch_kernels_optimized", "executorch_kernels_quantized",
             "executorch_threadpool", "executorch")
# What the wheel's executorch-config.cmake sets for consumers: the vendored c10 headers otherwise reach for a
# header generated inside a PyTorch build, and the libraries are compiled with the event tracer on.
DEFINES = ("C10_USING_CUSTOM_GENERATED_MACROS", "ET_EVENT_TRACER_ENABLED")
REQUIRED_BACKEND = "XnnpackBackend"  # every .pte recipe of edgeprune delegates to it
# on the board, with the environment's python: where the executorch package is, without importing it
PACKAGE_DIR = "import importlib.util; print(importlib.util.find_spec('executorch').submodule_search_locations[0])"


@dataclass
class RunnerBuild:
    """A runner in place: where, whether this call compiled it (and in how long), what registered on load."""

    path: str
    built: bool
    seconds: float
    backends: list[str]
    kernels: int


def compile_argv(package_dir: str, source: str, output: str, compiler: str = "g++") -> list[str]:
    """The compile-and-link line for the runner against the executorch package at `package_dir`."""
    include, lib = f"{package_dir}/include", f"{package_dir}/lib"
    return [compiler, "-O2", "-std=c++17", *(f"-D{name}" for name in DEFINES), f"-I{include}",
            f"-I{include}/executorch/runtime/core/portable_type/c10", source, "-o", output, f"-L{lib}",
            "-Wl,--no-as-needed", *(f"-l{name}" for name in LIBRARIES), "-Wl,--as-needed", f"-Wl,-rpath,{lib}"]


def build_digest(executorch_version: str) -> str:
    line = shlex.join(compile_argv("PACKAGE", "SOURCE", "OUTPUT"))
    return hashlib.sha256(RUNNER_SOURCE.read_bytes() + line.encode() + executorch_version.encode()).hexdigest()


def parse_backends(output: str) -> tuple[list[str], int]:
    """(backends, kernel count) from `executor_runner --list_backends`; ValueError when it printed neither."""
    backends = kernels = None
    for line in output.splitlines():
        if line.startswith("backends:"):
            backends = line.split(":", 1)[1].split()
        elif line.startswith("kernels:"):
            kernels = int(line.split(":", 1)[1])
    if backends is None or kernels is None:
        raise ValueError(f"no backends and kernels in {output.strip()[-200:]!r}")
    return backends, kernels


def checked(path: str, output: str, where: str) -> tuple[list[str], int]:
    try:
        backends, kernels = parse_backends(output)
    except ValueError as error:
        raise EdgepruneError(f"the ExecuTorch runner at {path} on {where} does not start: {error}") from None
    if REQUIRED_BACKEND not in backends:
        raise EdgepruneError(f"the ExecuTorch runner at {path} on {where} loaded without {REQUIRED_BACKEND} "
                             f"(backends: {', '.join(backends) or 'none'}): the .pte recipes need it")
    return backends, kernels


def build_on_board(transport: Transport, python: str, path: str, executorch_version: str,
                   timeout_s: float = 1800) -> RunnerBuild:
    """The runner at `path` on the board, compiled there with its g++ unless a build of this source and version
    is already in place; checked by loading it (the XNNPACK backend must register)."""
    digest = build_digest(executorch_version)
    stamp = f"{path}.build-sha256"
    quoted = shlex.quote(path)
    found = transport.run(["sh", "-c", f"test \"$(cat {shlex.quote(stamp)} 2>/dev/null)\" = {digest} "
                                       f"&& {quoted} --list_backends"], timeout_s=300)
    if found.exit_code == 0:
        backends, kernels = checked(path, found.stdout, transport.label)
        return RunnerBuild(path, False, 0.0, backends, kernels)
    if transport.run(["sh", "-c", "command -v g++"], timeout_s=60).exit_code != 0:
        raise UserInputError(f"{transport.label} has no C++ compiler, which builds the ExecuTorch runner there from "
                             "the executorch wheel: install one (sudo apt install g++) and run setup again")
    located = transport.run([python, "-c", PACKAGE_DIR], timeout_s=300)
    if located.exit_code != 0:
        raise EdgepruneError(f"the executorch package is not installed for {python} on {transport.label}: "
                             f"{located.stderr.strip()[-300:]}")
    package_dir = located.stdout.strip().splitlines()[-1]
    source = transport.push(RUNNER_SOURCE, RUNNER_SOURCE.name)
    started = time.monotonic()
    argv = compile_argv(package_dir, source, path)
    done = transport.run(["sh", "-c", f"mkdir -p {shlex.quote(str(Path(path).parent))} && nice -n 10 "
                                      f"{shlex.join(argv)} && echo {digest} > {shlex.quote(stamp)}"],
                         timeout_s=timeout_s)
    seconds = round(time.monotonic() - started, 1)
    if done.exit_code != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:])[-600:]
        raise EdgepruneError(f"building the ExecuTorch runner on {transport.label} failed (exit {done.exit_code}): "
                             f"{tail}")
    loaded = transport.run([path, "--list_backends"], timeout_s=300)
    backends, kernels = checked(path, loaded.stdout + loaded.stderr, transport.label)
    return RunnerBuild(path, True, seconds, backends, kernels)


def build_here(output: Path, compiler: str = "g++") -> RunnerBuild:
    """The runner compiled on this host against the executorch package installed here (for a Linux host or a
    board of this host's architecture; `bench --binary` takes the file)."""
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise UserInputError("executorch is not installed here (pip install -e '.[all]')")
    package_dir = spec.submodule_search_locations[0]
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        done = subprocess.run(compile_argv(package_dir, str(RUNNER_SOURCE), str(output), compiler),
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise UserInputError(f"{compiler} is not installed here (apt install g++)") from None
    if done.returncode != 0:
        raise EdgepruneError(f"building the ExecuTorch runner failed: {done.stderr.strip()[-600:]}")
    seconds = round(time.monotonic() - started, 1)
    loaded = subprocess.run([str(output), "--list_backends"], capture_output=True, text=True)
    backends, kernels = checked(str(output), loaded.stdout + loaded.stderr, "this host")
    return RunnerBuild(str(output), True, seconds, backends, kernels)
