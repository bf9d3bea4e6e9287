"""How long a benchmark must time to be repeatable on this machine: the spread of a file's p50 over fresh runner
processes, timing a few runs (fit's default, 30) against a longer window, interleaved.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/bench_window.py [--repeats 12] [--runs 30,400]

MiniLM (minilm-bbc) exported to LiteRT int8 dense and with three quarters of its heads removed (p50 about 6 and
2.5 ms here: 30 runs time 0.1-0.2 s). For each artifact and run count, `--repeats` benchmarks in fresh processes
through the local runner (as fit's are), the run counts alternating; prints the median p50, the spread of the
p50s (max / min), the share within ±10 % of their median and their coefficient of variation, and writes
bench_window.json. Run nothing else meanwhile.
"""

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from edgeprune import bundled_task
from edgeprune.bench import benchmark_local
from edgeprune.devices import load_profile
from edgeprune.export import export
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import prune_heads


def spread(p50s: list[float]) -> dict:
    median = statistics.median(p50s)
    return {"median_ms": median, "max_over_min": max(p50s) / min(p50s),
            "within_10pct": sum(abs(p - median) <= 0.1 * median for p in p50s) / len(p50s),
            "cv": statistics.pstdev(p50s) / statistics.fmean(p50s), "p50s_ms": p50s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=12, help="fresh-process benchmarks per artifact and run count")
    parser.add_argument("--runs", default="30,400", help="timed runs per benchmark, comma-separated")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    run_counts = [int(count) for count in args.runs.split(",")]
    threads = load_profile("host").threads
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    example = task.example_inputs("validation", 1)[0]
    layers = len(adapter_for(teacher).attention_blocks(teacher))
    pruned = prune_heads(copy.deepcopy(teacher), {layer: list(range(9)) for layer in range(layers)})
    rows = {}
    with tempfile.TemporaryDirectory(prefix="edgeprune-window-") as scratch:
        artifacts = {name: export(model, example, Path(scratch) / f"{name}.tflite", "litert-int8").path
                     for name, model in (("dense", teacher), ("heads-75%", pruned))}
        p50s = {(name, runs): [] for name in artifacts for runs in run_counts}
        for repeat in range(args.repeats):
            for name, path in artifacts.items():
                for runs in run_counts:  # alternating: the machine's drift touches every setting alike
                    p50s[(name, runs)].append(benchmark_local(path, example, threads, runs=runs).p50_ms)
            print(f"round {repeat + 1} of {args.repeats}", file=sys.stderr)
    print(f"LiteRT int8 MiniLM, {threads} threads, {args.repeats} fresh processes each, torch threads "
          f"{torch.get_num_threads()}, {os.cpu_count()} CPUs")
    print(f"{'artifact':<10} {'runs':>5} {'median p50':>11} {'max/min':>8} {'within ±10%':>12} {'cv':>7}")
    for (name, runs), values in p50s.items():
        row = spread(values)
        rows[f"{name}/{runs}"] = row
        print(f"{name:<10} {runs:>5} {row['median_ms']:>8.2f} ms {row['max_over_min']:>8.2f} "
              f"{row['within_10pct']:>11.0%} {row['cv']:>7.1%}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "bench_window.json"
    path.write_text(json.dumps({"threads": threads, "repeats": args.repeats, "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
