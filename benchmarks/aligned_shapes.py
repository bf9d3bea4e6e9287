"""Do aligned FFN widths run faster per FLOP? Dense `minilm-bbc` with every layer's FFN cut to one width, int8 in
ExecuTorch and LiteRT, latency per GFLOP side by side.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/aligned_shapes.py [--widths 1152,1151,1144,1136,1024]
        [--threads 2] [--runs 40] [--rounds 2] [--out benchmarks/results]

Each width keeps the first W neurons of every layer (which neurons go does not change the kernels' work). Every
artifact runs in its own process; the widths alternate for --rounds rounds (forward, then backward order) and the
median of the rounds' p50 is reported, with milliseconds per GFLOP (matmul FLOPs counted by torch) relative to
the first width. Writes aligned_shapes.json. Run nothing else meanwhile.
"""

import argparse
import copy
import json
import os
import statistics
import sys
from pathlib import Path

from edgeprune import bundled_task
from edgeprune.bench import benchmark_local
from edgeprune.export import export
from edgeprune.progress import Progress
from edgeprune.pruning import measure_flops
from edgeprune.pruning.ffn import intermediate_sizes, remove_neurons

RECIPES = {"executorch": "int8", "litert": "litert-int8"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", default="1152,1151,1144,1136,1024", help="FFN widths, comma-separated")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    example = task.example_inputs("validation", 1)[0]
    inputs = dict(zip(task.input_names, example, strict=True))
    dense = intermediate_sizes(teacher)
    work = args.out / "aligned_shapes"
    work.mkdir(parents=True, exist_ok=True)
    artifacts, flops = {}, {}
    for width in widths:
        model = remove_neurons(copy.deepcopy(teacher), {layer: list(range(width, size))
                                                        for layer, size in enumerate(dense) if size > width})
        flops[width] = measure_flops(model, inputs)
        for runtime, recipe in RECIPES.items():
            suffix = ".pte" if runtime == "executorch" else ".tflite"
            artifacts[runtime, width] = export(model, example, work / f"ffn{width}-{recipe}{suffix}", recipe).path
            print(f"exported FFN {width} {recipe}", file=sys.stderr)
    p50s: dict[tuple[str, int], list[float]] = {key: [] for key in artifacts}
    for round_index in range(args.rounds):
        for width in widths if round_index % 2 == 0 else widths[::-1]:
            for runtime in RECIPES:
                result = benchmark_local(artifacts[runtime, width], example, args.threads, runtime, runs=args.runs)
                p50s[runtime, width].append(result.p50_ms)
    rows = []
    print(f"threads {args.threads}; dense FFN widths {sorted(set(dense))}; {len(dense)} layers")
    print(f"{'runtime':<11} {'FFN width':>9} {'GFLOP':>7} {'p50 ms':>8} {'ms/GFLOP':>9} {'vs first':>9}")
    for runtime, recipe in RECIPES.items():
        first = None
        for width in widths:
            p50 = statistics.median(p50s[runtime, width])
            per_gflop = p50 / (flops[width] / 1e9)
            first = first or per_gflop
            rows.append({"runtime": runtime, "recipe": recipe, "ffn_width": width, "gflop": flops[width] / 1e9,
                         "p50_ms": p50, "p50_rounds": p50s[runtime, width], "ms_per_gflop": per_gflop,
                         "relative_to_first": per_gflop / first, "multiple_of": _largest_power_of_two(width)})
            print(f"{runtime:<11} {width:>9} {flops[width] / 1e9:>7.3f} {p50:>8.2f} {per_gflop:>9.3f} "
                  f"{per_gflop / first:>9.3f}")
    path = args.out / "aligned_shapes.json"
    path.write_text(json.dumps({"threads": args.threads, "cpus": os.cpu_count(), "runs": args.runs,
                                "rounds": args.rounds, "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _largest_power_of_two(width: int) -> int:
    return width & -width


if __name__ == "__main__":
    sys.exit(main())
