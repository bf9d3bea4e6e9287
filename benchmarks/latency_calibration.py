"""The latency model once calibrated on the device (issue 16, item 5): how close are its predictions when it has
measurements of the recipe to learn from?

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/latency_calibration.py [--count 12] [--threads 2]
        [--runs 30] [--rounds 2] [--seed 0] [--out benchmarks/results]
    .venv/bin/python benchmarks/latency_calibration.py --analyse benchmarks/results/latency_calibration.json

`--count` structures of `minilm-bbc`'s MiniLM, drawn with `--seed` from a grid of uniform head counts, FFN widths
and layers removed (the dimensions fit searches; dense included), are exported with int8 for ExecuTorch and
LiteRT and benchmarked here, each in its own process, alternating over `--rounds` rounds; the median of the
rounds' p50 is the measurement. Then, per recipe, in the shuffled order a search would meet them, the latency
model (`edgeprune.search.latency.LatencyModel`, the one fit uses) predicts each structure's p50 from the ones
measured before it: the predictions whose basis is a fitted line are the calibrated ones the ±10 %-on-90 %
target is about. A leave-one-out pass (every other structure of the recipe measured) is reported too, and the
measurement's own repeatability: the even rounds' median p50 of each file against its odd rounds' (a model
cannot be shown more exact than that). Writes
latency_calibration.json (every measurement, so `--analyse` re-scores a changed model without a benchmark).
Run nothing else meanwhile.
"""

import argparse
import copy
import json
import os
import random
import statistics
import sys
from pathlib import Path

from edgeprune.search.latency import LatencyModel, prediction_error
from edgeprune.serialization import to_jsonable

RECIPES = {"executorch": "int8", "litert": "litert-int8"}
HEADS_KEPT = (12, 10, 8, 6, 4)  # of 12 per layer
FFN_KEPT = (1.0, 0.75, 0.5, 0.25)  # of 1536 neurons per layer
LAYERS_REMOVED = (0, 1, 2)  # of 6, the last ones


def structures(count: int, seed: int) -> list[dict]:
    grid = [{"heads": h, "ffn": f, "layers_removed": r} for h in HEADS_KEPT for f in FFN_KEPT for r in LAYERS_REMOVED]
    dense, others = grid[0], grid[1:]
    return [dense, *random.Random(seed).sample(others, count - 1)]


def measure(args: argparse.Namespace) -> dict:
    from edgeprune import bundled_task
    from edgeprune.bench import benchmark_local
    from edgeprune.export import export
    from edgeprune.progress import Progress
    from edgeprune.pruning import PruningPlan, StructurePlan, apply_structure, measure_flops

    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    example = task.example_inputs("validation", 1)[0]
    inputs = dict(zip(task.input_names, example, strict=True))
    work = args.out / "latency_calibration"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for index, shape in enumerate(structures(args.count, args.seed)):
        layers = 6
        plan = StructurePlan(
            heads=PruningPlan([12] * layers, [list(range(shape["heads"]))] * layers),
            ffn_kept=[list(range(round(1536 * shape["ffn"])))] * layers,
            layers_removed=list(range(layers - shape["layers_removed"], layers)))
        model = apply_structure(copy.deepcopy(teacher), plan)
        row = {**shape, "gflop": measure_flops(model, inputs) / 1e9, "artifacts": {}, "p50_rounds": {}}
        for runtime, recipe in RECIPES.items():
            suffix = ".pte" if runtime == "executorch" else ".tflite"
            path = export(model, example, work / f"s{index}-{recipe}{suffix}", recipe).path
            row["artifacts"][recipe] = str(path)
            row["p50_rounds"][recipe] = []
        rows.append(row)
        print(f"exported {index + 1}/{args.count}: {shape} {row['gflop']:.3f} GFLOP", file=sys.stderr)
    for round_index in range(args.rounds):
        for row in rows if round_index % 2 == 0 else rows[::-1]:
            for runtime, recipe in RECIPES.items():
                result = benchmark_local(Path(row["artifacts"][recipe]), example, args.threads, runtime,
                                         runs=args.runs)
                row["p50_rounds"][recipe].append(result.p50_ms)
    for row in rows:
        row["p50_ms"] = {recipe: statistics.median(p50s) for recipe, p50s in row["p50_rounds"].items()}
    return {"threads": args.threads, "cpus": os.cpu_count(), "runs": args.runs, "rounds": args.rounds,
            "seed": args.seed, "rows": rows}


def analyse(data: dict, seed: int) -> dict:
    """Sequential predictions in a shuffled order (dense first, as a search measures it first), and leave-one-out."""
    report = {}
    for recipe in RECIPES.values():
        points = [(round(row["gflop"] * 1e9), row["p50_ms"][recipe]) for row in data["rows"]]
        order = [points[0], *random.Random(seed + 1).sample(points[1:], len(points) - 1)]
        model, sequential = LatencyModel(), []
        for flops, p50 in order:
            basis = model.basis(recipe)
            predicted = model.predict(recipe, flops)
            if predicted is not None:
                sequential.append((basis, predicted, p50))
            model.observe(recipe, flops, p50)
        loo = []
        for held in range(len(points)):
            model = LatencyModel()
            for index, (flops, p50) in enumerate(points):
                if index != held:
                    model.observe(recipe, flops, p50)
            loo.append((model.predict(recipe, points[held][0]), points[held][1]))
        fitted = [(p, m) for basis, p, m in sequential if basis == "fitted"]
        # the noise floor: the median of the even rounds taken as a "prediction" of the odd rounds' median, for the
        # same file; no model can be judged more exact than the measurement is repeatable
        rounds = [row["p50_rounds"][recipe] for row in data["rows"] if len(row["p50_rounds"][recipe]) >= 2]
        halves = [(statistics.median(p50s[0::2]), statistics.median(p50s[1::2])) for p50s in rounds]
        report[recipe] = {"repeatability": to_jsonable(prediction_error(halves)),
                          "sequential_all": to_jsonable(prediction_error((p, m) for _, p, m in sequential)),
                          "sequential_fitted": to_jsonable(prediction_error(fitted)),
                          "leave_one_out": to_jsonable(prediction_error(loo)),
                          "sequential": [{"basis": b, "predicted_ms": p, "measured_ms": m} for b, p, m in sequential]}
    return report


def print_tables(data: dict, report: dict) -> None:
    print(f"threads {data['threads']} (cpus {data['cpus']}); {data['runs']} runs x {data['rounds']} rounds; "
          f"{len(data['rows'])} structures")
    recipes = " ".join(f"{recipe + ' ms':>16}" for recipe in RECIPES.values())
    print(f"{'heads':>5} {'FFN':>5} {'layers-':>7} {'GFLOP':>7} {recipes}")
    for row in data["rows"]:
        print(f"{row['heads']:>5} {row['ffn']:>5} {row['layers_removed']:>7} {row['gflop']:>7.3f} "
              + " ".join(f"{row['p50_ms'][r]:>16.2f}" for r in RECIPES.values()))
    print("| recipe | predictions | within ±10 % | median error | p90 error |")
    print("|---|---|---|---|---|")
    for recipe, parts in report.items():
        for name in ("repeatability", "sequential_all", "sequential_fitted", "leave_one_out"):
            error = parts[name]
            if error["count"]:
                print(f"| {recipe} {name.replace('_', ' ')} | {error['count']} | {error['within_10_percent']:.0%} | "
                      f"{error['median_abs_percent']:.1f} % | {error['p90_abs_percent']:.1f} % |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--analyse", type=Path, help="re-score the measurements of an earlier run, benchmark nothing")
    args = parser.parse_args()
    if not 3 <= args.count <= len(HEADS_KEPT) * len(FFN_KEPT) * len(LAYERS_REMOVED):
        parser.error("--count must be between 3 and the grid's size (60)")
    data = json.loads(args.analyse.read_text()) if args.analyse else measure(args)
    report = analyse(data, data["seed"])
    print_tables(data, report)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "latency_calibration.json"
    path.write_text(json.dumps({**data, "report": report}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
