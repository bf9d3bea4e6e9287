"""Benchmark an artifact in a separate process and return a typed result."""

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from edgeprune.devices.profile import Endpoint
from edgeprune.devices.transports.base import Transport
from edgeprune.errors import EdgepruneError

RUNNER = Path(__file__).with_name("runner.py")


@dataclass
class BenchmarkResult:
    device: str
    runtime: str
    threads: int
    warmup_runs: int
    timed_runs: int
    latency_ms: list[float]
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    cv: float  # coefficient of variation of the timed runs
    first_run_ms: float
    load_ms: float
    rss_before_load_mb: float  # the process with the runtime imported, before the program loads
    peak_rss_mb: float  # peak resident memory of the whole benchmark process
    file_bytes: int
    measured: bool = True  # every figure here comes from running the artifact on `device`

    @property
    def file_mb(self) -> float:
        return self.file_bytes / 1e6


def benchmark_local(
    artifact: Path,
    inputs: tuple[torch.Tensor, ...],
    threads: int,
    runtime: str | None = None,
    warmup: int = 5,
    runs: int = 30,
    device: str = "host",
    timeout_s: float = 600,
) -> BenchmarkResult:
    """Run the self-contained runner on this machine in a fresh Python process.

    The runtime follows the file type (`.pte`: ExecuTorch, `.tflite`: LiteRT) unless given.
    """
    from edgeprune.devices.transports.local import LocalTransport

    with LocalTransport(Endpoint("local"), python=sys.executable) as transport:
        return benchmark_on(transport, artifact, inputs, runtime, threads, warmup, runs, device, timeout_s)


def benchmark_on(
    transport: Transport,
    artifact: Path,
    inputs: tuple[torch.Tensor, ...],
    runtime: str | None,
    threads: int,
    warmup: int = 5,
    runs: int = 30,
    device: str = "host",
    timeout_s: float = 600,
) -> BenchmarkResult:
    """Push the runner, the artifact and the inputs to a device, time the artifact there, fetch the result.

    The device needs `transport.python` with numpy and the runtime package; the work folder is left for
    `transport.close()` to remove.
    """
    if runs < 1 or warmup < 0:
        raise ValueError(f"need runs >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    if threads < 1:
        raise ValueError(f"need threads >= 1, got {threads}")
    artifact = Path(artifact)
    runtime = runtime or {".pte": "executorch", ".tflite": "litert"}.get(artifact.suffix)
    if runtime is None:
        raise ValueError(f"{artifact}: cannot tell the runtime from the file type; pass runtime=")
    with tempfile.TemporaryDirectory(prefix="edgeprune-bench-") as scratch:
        inputs_path = Path(scratch) / "inputs.npz"
        np.savez(inputs_path, **{f"arg_{i}": t.numpy() for i, t in enumerate(inputs)})
        runner = transport.push(RUNNER, "edgeprune_runner.py")
        # the artifact keeps its suffix (runtimes check it) but not its name, which may clash with ours
        remote_artifact = transport.push(artifact, f"artifact{artifact.suffix}")
        remote_inputs = transport.push(inputs_path, "inputs.npz")
        command = [*transport.pin_prefix(threads), transport.python, runner, "--artifact", remote_artifact,
                   "--runtime", runtime, "--inputs", remote_inputs, "--threads", str(threads),
                   "--warmup", str(warmup), "--runs", str(runs), "--out", "result.json"]
        done = transport.run(command, timeout_s=timeout_s, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        if done.exit_code != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise EdgepruneError(f"benchmark of {artifact} on {transport.label} failed (exit {done.exit_code}): "
                                 f"{' | '.join(tail)}")
        try:
            data = json.loads(transport.fetch("result.json", Path(scratch) / "result.json").read_text())
        except (EdgepruneError, json.JSONDecodeError) as error:
            raise EdgepruneError(f"benchmark of {artifact} on {transport.label} left no result ({error}); "
                                 f"it printed {done.stdout[-300:]!r}") from None
    return BenchmarkResult(device=device, **data)
