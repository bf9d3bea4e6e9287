"""Self-contained benchmark runner: loads an artifact in a fresh process, times it, prints JSON.

Runs as a plain script (`python runner.py ...`) with only the standard library, torch (for input
tensors) and the runtime package, so it does not import edgeprune and its memory figures are the
runtime's own. It is the same file a Linux device will run.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time


def status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status, in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_rss_mb() -> float:
    # VmHWM belongs to this process image; ru_maxrss would carry the parent's peak across fork+exec
    try:
        return status_mb("VmHWM")
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--inputs", required=True, help="torch.save'd tuple of input tensors")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)  # torch only builds inputs; its OpenMP threads must not compete
    inputs = list(torch.load(args.inputs))
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    _unsafe_reset_threadpool(args.threads)  # before any program loads
    runtime = Runtime.get()
    rss_before_load = status_mb("VmRSS")
    start = time.perf_counter()
    method = runtime.load_program(args.artifact).load_method("forward")
    load_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    method.execute(inputs)
    first_ms = (time.perf_counter() - start) * 1000
    for _ in range(args.warmup):
        method.execute(inputs)
    samples = []
    for _ in range(args.runs):
        start = time.perf_counter()
        method.execute(inputs)
        samples.append((time.perf_counter() - start) * 1000)
    mean = statistics.fmean(samples)
    result = {
        "runtime": "executorch",
        "threads": args.threads,
        "warmup_runs": args.warmup,
        "timed_runs": args.runs,
        "latency_ms": samples,
        "p50_ms": percentile(samples, 50),
        "p90_ms": percentile(samples, 90),
        "p99_ms": percentile(samples, 99),
        "mean_ms": mean,
        "cv": statistics.pstdev(samples) / mean if mean else 0.0,
        "first_run_ms": first_ms,
        "load_ms": load_ms,
        "rss_before_load_mb": rss_before_load,
        "peak_rss_mb": peak_rss_mb(),
        "file_bytes": os.path.getsize(args.artifact),
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
