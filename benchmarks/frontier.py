"""Issue 16's frontier on `minilm-bbc`, measured in one run: the smallest and the fastest artifact fit finds within
a point of the dense teacher on the test split, through the runtimes, each fit's wall time, and heads removed with
recovery.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/frontier.py [--max-mb 5] [--speedup 4]
        [--recover-steps 150] [--heads 0.5,0.75] [--rounds 3] [--cold] [--time-limit MINUTES]
        [--out benchmarks/results]
    .venv/bin/python benchmarks/frontier.py --quick      # a tiny run that proves the script works

1. `fit --max-mb MAX_MB` over ExecuTorch with `--recover-steps` (`--cold`: from an empty cache, as the targets
   ask); its dense fp32 baseline `.pte` is benchmarked again in a fresh process (the host profile's threads) and
   a `1/speedup` share of that p50 is the latency budget.
2. `fit --max-latency-ms (p50 / speedup)` over ExecuTorch and LiteRT, likewise. `--time-limit`: both fits with fit's
   `--time-limit` (the table says so, and whether the search stopped at it).
3. The dense `.pte` and both fitted artifacts benchmarked again, side by side, `rounds` times interleaved (fresh
   processes; the fitted ones with their trimmed-vocabulary ids): the median p50 of each and the ratios.
4. `benchmarks/recovery.py --ratios HEADS` in a subprocess: that share of heads removed one-shot and recovered.
Prints the targets against what was measured; writes frontier.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from edgeprune import Budget, FitOptions, bundled_task, fit
from edgeprune.bench import benchmark_local
from edgeprune.devices import load_profile
from edgeprune.progress import Progress
from edgeprune.quantize.vocabulary import VocabularyMap
from edgeprune.search.ship import VOCABULARY_NAME

HERE = Path(__file__).resolve().parent


def fitted_inputs(folder: Path, example: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    """The example as a fitted folder's artifact takes it: ids through its vocabulary map when it ships one."""
    map_file = folder / VOCABULARY_NAME
    if not map_file.is_file():
        return example
    return (VocabularyMap.load(map_file).apply(example[0]), *example[1:])


def run_fit(budget: Budget, runtime: str, steps: int, out: Path, cache: Path | None,
            time_limit: float | None = None) -> dict:
    if cache is not None:
        os.environ["EDGEPRUNE_CACHE"] = str(cache)
    started = time.perf_counter()
    result = fit(bundled_task("minilm-bbc", progress=Progress(interval_s=60)), device="host", budget=budget,
                 out=out, options=FitOptions(runtime=runtime, recover_steps=steps, time_limit_minutes=time_limit),
                 progress=Progress(interval_s=60))
    fitted = result.fitted
    return {"wall_s": round(time.perf_counter() - started, 1), "fits": result.fits, "message": result.message,
            "artifact": str(Path(result.out_dir) / fitted.path), "recipe": fitted.recipe.name,
            "dense_artifact": str(Path(result.out_dir) / result.dense.path),
            "structure": fitted.describe(),
            "file_bytes": fitted.file_bytes, "test_accuracy": fitted.test_accuracy,
            "dense_test_accuracy": result.dense.test_accuracy, "in_run_p50_ms": fitted.benchmark.p50_ms,
            "in_run_dense_p50_ms": result.dense.benchmark.p50_ms, "recovery": fitted.recovery,
            "candidates_built": len(result.candidates), "stopped_early": result.search_stopped_early}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-mb", type=float, default=5.0)
    parser.add_argument("--speedup", type=float, default=4.0, help="the latency budget: dense p50 / this")
    parser.add_argument("--recover-steps", type=int, default=150)
    parser.add_argument("--heads", default="0.5,0.75", help="shares of heads removed with recovery ('' skips)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved benchmark rounds of the three artifacts")
    parser.add_argument("--cold", action="store_true", help="each fit from an empty cache (EDGEPRUNE_CACHE)")
    parser.add_argument("--time-limit", type=float, metavar="MINUTES", help="fit's --time-limit for both fits")
    parser.add_argument("--quick", action="store_true", help="tiny settings: proves the script runs")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    if args.quick:
        args.max_mb, args.speedup, args.recover_steps, args.rounds = 60.0, 1.2, 4, 1
    profile = load_profile("host")
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    example = task.example_inputs("validation", 1)[0]
    summary: dict = {"torch_threads": torch.get_num_threads(), "bench_threads": profile.threads,
                     "cpus": os.cpu_count(), "settings": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="edgeprune-frontier-") as scratch:
        work = Path(scratch)
        fits = {"size": run_fit(Budget(max_mb=args.max_mb), "executorch", args.recover_steps, work / "size",
                                work / "cache-size" if args.cold else None, args.time_limit)}
        dense = Path(fits["size"]["dense_artifact"])  # the fit's own dense baseline: no export of our own
        dense_p50 = benchmark_local(dense, example, profile.threads, runs=30).p50_ms
        budget_ms = round(dense_p50 / args.speedup, 2)
        print(f"dense fp32 .pte p50 {dense_p50:.2f} ms at {profile.threads} threads: latency budget {budget_ms} ms",
              file=sys.stderr)
        fits["latency"] = run_fit(Budget(max_latency_ms=budget_ms), "executorch,litert", args.recover_steps,
                                  work / "latency", work / "cache-latency" if args.cold else None, args.time_limit)
        artifacts = {"dense": (dense, example)}
        for name, record in fits.items():
            path = Path(record["artifact"])
            artifacts[name] = (path, fitted_inputs(path.parent, example))
        p50s: dict[str, list[float]] = {name: [] for name in artifacts}
        for _ in range(args.rounds):  # interleaved: the machine's drift touches all three alike
            for name, (path, inputs) in artifacts.items():
                p50s[name].append(benchmark_local(path, inputs, profile.threads, runs=30).p50_ms)
        medians = {name: statistics.median(values) for name, values in p50s.items()}
    summary.update({"dense_p50_ms_first": dense_p50, "latency_budget_ms": budget_ms, "fits": fits,
                    "side_by_side_p50_ms": p50s, "median_p50_ms": medians})
    heads_rows = []
    if args.heads:
        recovery_out = args.out / "frontier-recovery"
        settings = ["--quick"] if args.quick else ["--ratios", args.heads, "--max-steps", "400", "--max-seconds",
                                                    "280", "--eval-every", "50", "--iterative-steps", "0"]
        subprocess.run([sys.executable, str(HERE / "recovery.py"), *settings, "--out", str(recovery_out)], check=True)
        written = recovery_out / ("recovery-quick.json" if args.quick else "recovery.json")
        heads_rows = json.loads(written.read_text())["rows"]
        summary["heads"] = heads_rows
    teacher = fits["size"]["dense_test_accuracy"]
    print(f"minilm-bbc, test split; dense fp32 .pte test accuracy {teacher:.2%}; benchmarks at {profile.threads} "
          f"threads, {args.rounds} interleaved rounds (median p50); torch threads {torch.get_num_threads()}")
    print(f"{'target':<44} {'measured':<58} {'met':>4}")
    size, fast = fits["size"], fits["latency"]

    def line(target: str, measured: str, met: bool) -> None:
        print(f"{target:<44} {measured:<58} {'yes' if met else 'no':>4}")

    line(f"smallest within 1 point: <= {args.max_mb:g} MB",
         f"{size['file_bytes'] / 1e6:.2f} MB, test {size['test_accuracy']:.2%} "
         f"({(size['test_accuracy'] - teacher) * 100:+.2f} pt)",
         size["fits"] and size["file_bytes"] <= args.max_mb * 1e6
         and teacher - size["test_accuracy"] <= 0.01)
    ratio = medians["dense"] / medians["latency"]
    line(f"fastest within 1 point: >= {args.speedup:g}x dense fp32",
         f"{ratio:.2f}x ({medians['latency']:.2f} vs {medians['dense']:.2f} ms), test {fast['test_accuracy']:.2%} "
         f"({(fast['test_accuracy'] - teacher) * 100:+.2f} pt)",
         ratio >= args.speedup and teacher - fast["test_accuracy"] <= 0.01)
    limited = f" --time-limit {args.time_limit:g}" if args.time_limit is not None else ""
    for name, record in fits.items():
        stopped = ", at its limit" if record["stopped_early"] else ""
        line(f"fit --{'max-mb' if name == 'size' else 'max-latency-ms'}{limited} within 15 min",
             f"{record['wall_s'] / 60:.1f} min{stopped} ({record['recipe']}, {record['structure']})"[:58],
             record["wall_s"] <= 900 and record["fits"])
    for row in heads_rows:
        if row["method"] == "one-shot + distill":
            line(f"{row['ratio']:.0%} of heads removed, recovered, < 5 min",
                 f"test {row['accuracy']:.2%} ({(row['accuracy'] - teacher) * 100:+.2f} pt), "
                 f"{row['recovery_seconds']:.0f} s", row["recovery_seconds"] < 300
                 and (row["ratio"] < 0.75 or teacher - row["accuracy"] <= 0.005))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("frontier-quick.json" if args.quick else "frontier.json")
    path.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
