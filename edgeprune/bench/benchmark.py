"""Benchmark an artifact in a separate process and return a typed result."""

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

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
    if runs < 1 or warmup < 0:
        raise ValueError(f"need runs >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    runtime = runtime or {".pte": "executorch", ".tflite": "litert"}.get(Path(artifact).suffix)
    if runtime is None:
        raise ValueError(f"{artifact}: cannot tell the runtime from the file type; pass runtime=")
    with tempfile.TemporaryDirectory(prefix="edgeprune-bench-") as scratch:
        inputs_path = Path(scratch) / "inputs.npz"
        np.savez(inputs_path, **{f"arg_{i}": t.numpy() for i, t in enumerate(inputs)})
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        command = [sys.executable, str(RUNNER), "--artifact", str(artifact), "--runtime", runtime,
                   "--inputs", str(inputs_path), "--threads", str(threads), "--warmup", str(warmup),
                   "--runs", str(runs)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise EdgepruneError(f"benchmark of {artifact} failed (exit {done.returncode}): {' | '.join(tail)}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise EdgepruneError(f"benchmark of {artifact} printed no result: {done.stdout[-500:]!r}")
    return BenchmarkResult(device=device, **json.loads(lines[-1]))
