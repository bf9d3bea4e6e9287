"""int8 vs fp32 latency in the same runtime, side by side: dense `minilm-bbc`, ExecuTorch and LiteRT.

    .venv/bin/python benchmarks/int8_speedup.py [--runs 40] [--rounds 3] [--out benchmarks/results]

Each artifact runs in its own process; fp32 and int8 alternate for --rounds rounds at 1 and 2 threads
and the median of the rounds' p50 is reported. Run nothing else meanwhile.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from edgeprune import bundled_task
from edgeprune.bench import benchmark_local
from edgeprune.export import export
from edgeprune.progress import Progress

PAIRS = {"executorch": ("fp32", "int8"), "litert": ("litert-fp32", "litert-int8")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    example = task.example_inputs("validation", 1)[0]
    work = args.out / "int8_speedup"
    work.mkdir(parents=True, exist_ok=True)
    paths = {}
    for runtime, recipes in PAIRS.items():
        for recipe in recipes:
            suffix = ".pte" if runtime == "executorch" else ".tflite"
            paths[recipe] = export(teacher, example, work / f"{recipe}{suffix}", recipe).path
    rows = []
    for runtime, (fp32, int8) in PAIRS.items():
        for threads in (1, 2):
            p50 = {fp32: [], int8: []}
            for _ in range(args.rounds):
                for recipe in (fp32, int8):
                    result = benchmark_local(paths[recipe], example, threads, runtime, runs=args.runs)
                    p50[recipe].append(result.p50_ms)
            fp32_ms, int8_ms = statistics.median(p50[fp32]), statistics.median(p50[int8])
            rows.append({"runtime": runtime, "threads": threads, "fp32_p50_ms": fp32_ms, "int8_p50_ms": int8_ms,
                         "speedup": fp32_ms / int8_ms, "rounds": p50})
            print(f"{runtime} {threads}t: fp32 {fp32_ms:.1f} ms, int8 {int8_ms:.1f} ms, {fp32_ms / int8_ms:.2f}x",
                  file=sys.stderr)
    print("| runtime | threads | fp32 p50 ms | int8 p50 ms | speed-up |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['runtime']} | {r['threads']} | {r['fp32_p50_ms']:.1f} | {r['int8_p50_ms']:.1f} "
              f"| {r['speedup']:.2f}x |")
    (args.out / "int8_speedup.json").write_text(json.dumps({"runs": args.runs, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
