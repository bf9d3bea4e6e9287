"""Dense vs fitted `minilm-bbc` on this machine: size, latency, memory, accuracy. Prints a table, writes JSON.

    .venv/bin/python benchmarks/fit_minilm.py --max-mb 30 [--max-mb 21 ...] [--out benchmarks/results]

Each budget runs a full `fit` (teacher and exports come from the cache after the first run). Both
artifacts of a fit are benchmarked side by side in fresh processes with the device profile's thread
count; run nothing else meanwhile.
"""

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from edgeprune import Budget, FitOptions, bundled_task, fit
from edgeprune.progress import Progress
from edgeprune.serialization import to_jsonable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-mb", type=float, action="append", help="budget(s) in MB (default: 30)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--runs", type=int, default=40, help="timed runs per artifact")
    args = parser.parse_args()
    budgets = args.max_mb or [30.0]
    rows, records = [], []
    for max_mb in budgets:
        out = args.out / f"fit_minilm-{max_mb:g}mb"
        shutil.rmtree(out, ignore_errors=True)
        started = time.perf_counter()
        result = fit(bundled_task("minilm-bbc", progress=Progress()), device="host", budget=Budget(max_mb=max_mb),
                     out=out, options=FitOptions(bench_runs=args.runs))
        wall = time.perf_counter() - started
        records.append({"max_mb": max_mb, "wall_s": round(wall, 1), "result": to_jsonable(result)})
        for artifact in (result.dense, result.fitted):
            bench = artifact.benchmark
            rows.append([f"{max_mb:g}", artifact.label, artifact.recipe.name, str(artifact.heads_removed),
                         f"{artifact.file_bytes / 1e6:.2f}", f"{bench.p50_ms:.1f}", f"{bench.p90_ms:.1f}",
                         f"{bench.peak_rss_mb:.0f}", f"{100 * artifact.test_accuracy:.2f}", str(bench.threads)])
        speedup = result.dense.benchmark.p50_ms / result.fitted.benchmark.p50_ms
        rows.append([f"{max_mb:g}", "speed-up", "", "", "", f"{speedup:.2f}x",
                     "", "", f"Δ {100 * (result.fitted.test_accuracy - result.dense.test_accuracy):+.2f}", ""])
        rows.append([f"{max_mb:g}", "teacher (PyTorch)", "fp32", "0", "", "", "", "",
                     f"{100 * result.teacher_test_accuracy:.2f}", ""])
        print(f"budget {max_mb:g} MB: {result.message}; fit took {wall:.0f} s", file=sys.stderr)
    header = ["budget MB", "artifact", "recipe", "heads removed", "file MB", "p50 ms", "p90 ms", "peak RSS MB",
              "test acc %", "threads"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                           "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}, "fits": records}
    path = args.out / "fit_minilm.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
