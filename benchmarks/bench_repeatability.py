"""Repeatability of `bench` over SSH, and what SSH adds, for the MiniLM `.pte` and `.tflite`.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/bench_repeatability.py [--repeats 5] [--runs 30]

Starts its own OpenSSH server on 127.0.0.1 (a free port, throwaway host and client keys, the way
tests/sshd.py does) and stops it at the end. For each artifact it makes --repeats bench calls over
SSH and as many through the local transport, alternating, each a fresh connection and a fresh runner
process, and reports the median p50 of each transport, the coefficient of variation of the SSH p50s
(target < 5 %) and SSH over local (target < 10 %). Run nothing else meanwhile.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/sshd.py lives beside the package

from edgeprune import bundled_task  # noqa: E402
from edgeprune.bench import benchmark_on  # noqa: E402
from edgeprune.devices.transports import open_transport  # noqa: E402
from edgeprune.devices.transports.local import LocalEndpoint  # noqa: E402
from edgeprune.export import export  # noqa: E402
from edgeprune.progress import Progress  # noqa: E402
from tests.sshd import start_sshd  # noqa: E402

RECIPES = {".pte": "fp32", ".tflite": "litert-fp32"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="bench calls per transport and artifact")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per bench call")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="runtime threads (default 1: two cores are shared, one thread varies least)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()

    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    example = task.example_inputs("validation", 1)[0]
    work = Path(tempfile.mkdtemp(prefix="bench-repeatability-"))
    paths = {}
    for suffix, recipe in RECIPES.items():
        paths[suffix] = export(teacher, example, work / f"minilm-{recipe}{suffix}", recipe,
                               cache_dir=task.cache_dir / "exports").path
    server = start_sshd(work / "sshd")
    endpoints = {"ssh": server.endpoint(), "local": LocalEndpoint()}
    rows = []
    try:
        for path in paths.values():
            p50 = {"ssh": [], "local": []}
            wall = {"ssh": [], "local": []}
            for _ in range(args.repeats):
                for name in ("ssh", "local"):
                    start = time.perf_counter()
                    with open_transport(endpoints[name], sys.executable) as transport:
                        result = benchmark_on(transport, path, example, None, args.threads, args.warmup, args.runs,
                                              device=f"loopback-{name}")
                    wall[name].append(time.perf_counter() - start)
                    p50[name].append(result.p50_ms)
                    print(f"{path.name} {name}: p50 {result.p50_ms:.2f} ms (cv within the call {result.cv:.3f}, "
                          f"{result.threads} threads, energy {result.energy_source})", file=sys.stderr)
            ssh, local = statistics.median(p50["ssh"]), statistics.median(p50["local"])
            rows.append({
                "artifact": path.name, "runtime": result.runtime, "threads": args.threads, "runs": args.runs,
                "ssh_p50_ms": p50["ssh"], "local_p50_ms": p50["local"], "ssh_median_p50_ms": ssh,
                "local_median_p50_ms": local,
                "ssh_cv_of_p50": statistics.pstdev(p50["ssh"]) / statistics.fmean(p50["ssh"]),
                "local_cv_of_p50": statistics.pstdev(p50["local"]) / statistics.fmean(p50["local"]),
                "ssh_over_local": ssh / local - 1,
                "ssh_call_seconds": statistics.median(wall["ssh"]),
                "local_call_seconds": statistics.median(wall["local"]),
            })
    finally:
        server.stop()
    threads_note = (f"runtime threads {args.threads}; OMP_NUM_THREADS=1 in the runner; {os.cpu_count()} CPUs; "
                    f"{args.repeats} bench calls per transport, {args.runs} timed runs each")
    print(threads_note)
    print("| artifact | threads | SSH median p50 | CV of SSH p50s | local median p50 | CV of local p50s "
          "| SSH over local | call time SSH / local |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['artifact']} | {r['threads']} | {r['ssh_median_p50_ms']:.2f} ms "
              f"| {100 * r['ssh_cv_of_p50']:.2f} % | {r['local_median_p50_ms']:.2f} ms "
              f"| {100 * r['local_cv_of_p50']:.2f} % | {100 * r['ssh_over_local']:+.2f} % "
              f"| {r['ssh_call_seconds']:.1f} s / {r['local_call_seconds']:.1f} s |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_repeatability.json").write_text(json.dumps(
        {"settings": threads_note, "targets": {"cv_of_p50": 0.05, "ssh_over_local": 0.10}, "rows": rows},
        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
