"""The fit search against an exhaustive grid over the same space, on `minilm-bbc` and `host`.

    .venv/bin/python benchmarks/fit_search.py [--max-mb 12 --max-mb 20 --max-mb 30] [--latency-fraction 0.6]
                                              [--recipes int8,int8-emb4,int4] [--out benchmarks/results]

For each budget (file sizes, and a latency budget at a fraction of the dense int8 p50 measured first),
a full `fit` runs from a cold cache: time to result, candidates built, validation and test quality of
the result. The grid builds every recipe × heads-removed candidate of the same space once, from a cold
cache (export, verify, benchmark on host, validation quality), then picks per budget the best validation
quality that meets it. Both use the same counts (multiples of the layer count, as the search does) and
the same benchmark settings; the machine's thread count is printed. Run nothing else meanwhile.
"""

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

from edgeprune import Budget, FitOptions, bundled_task, load_profile
from edgeprune.progress import Progress
from edgeprune.serialization import to_jsonable


def cold_task(cache: Path):  # noqa: ANN201 - a TextClassificationTask
    return bundled_task("minilm-bbc", cache_dir=cache, progress=Progress(enabled=False))


def dense_int8_p50(runs: int) -> float:
    from edgeprune.bench import benchmark_local
    from edgeprune.export import export

    with tempfile.TemporaryDirectory() as scratch:
        task = cold_task(Path(scratch) / "cache")
        model = task.teacher().model
        example = task.example_inputs("validation", 1)[0]
        artifact = export(model, example, Path(scratch) / "dense-int8.pte", "int8")
        return benchmark_local(artifact.path, example, threads=load_profile("host").threads, runs=runs).p50_ms


def run_fit(budget: Budget, recipes: tuple[str, ...], runs: int) -> dict:
    from edgeprune.search.fit import fit

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        result = fit(cold_task(Path(scratch) / "cache"), device="host", budget=budget, out=Path(scratch) / "fit",
                     options=FitOptions(recipes=recipes, bench_runs=runs))
        wall = time.perf_counter() - started
    fitted = result.fitted
    return {"wall_s": round(wall, 1), "candidates_built": len(result.candidates), "status": result.status,
            "recipe": fitted.recipe, "heads_removed": fitted.heads_removed, "file_mb": fitted.file_bytes / 1e6,
            "p50_ms": fitted.benchmark.p50_ms, "validation": fitted.validation_quality.value,
            "test": fitted.quality.value}


def run_grid(recipes: tuple[str, ...], runs: int, budgets: list[tuple[str, Budget]]) -> tuple[float, int, dict]:
    """Every candidate of the space, then the best per budget; returns wall time, count and the winners."""
    from edgeprune.devices.transports.base import open_transport
    from edgeprune.export import load_artifact
    from edgeprune.models import adapter_for
    from edgeprune.quantize import RECIPES
    from edgeprune.search.fit import _Builder, _Journal, _scores
    from edgeprune.tasks import Quality

    profile = load_profile("host")
    options = FitOptions(recipes=recipes, bench_runs=runs)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        started = time.perf_counter()
        task = cold_task(work / "cache")
        teacher = task.teacher()
        journal = _Journal(work / "journal.json", "grid", resume=False)
        scores = _scores(task, teacher.model, options, Progress(enabled=False), journal).normalize_per_layer()
        blocks = adapter_for(teacher.model).attention_blocks(teacher.model)
        removable = sum(b.num_heads - options.min_heads_per_layer for b in blocks)
        counts = sorted(set(range(0, removable + 1, len(blocks))) | {removable})
        with open_transport(profile.endpoint, profile.python) as link:
            builder = _Builder(teacher.model, scores, task, options, work, Progress(), "executorch", profile, link,
                               journal)
            built = [builder.candidate(RECIPES.get(recipe), count) for recipe in recipes for count in counts]
        wall = time.perf_counter() - started
        reference: Quality = teacher.validation
        winners = {}
        for name, budget in budgets:
            meeting = [c for c in built if all(check.passed for check in budget.check(
                c.file_bytes, c.benchmark, c.validation_quality, reference))]
            if not meeting:
                winners[name] = None
                continue
            best = max(meeting, key=lambda c: (c.validation_quality.value, -c.file_bytes))
            test = task.runtime_quality(load_artifact(work / best.path), "test").value
            winners[name] = {"recipe": best.recipe, "heads_removed": best.heads_removed,
                             "file_mb": best.file_bytes / 1e6, "p50_ms": best.benchmark.p50_ms,
                             "validation": best.validation_quality.value, "test": test}
    return wall, len(built), winners


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-mb", type=float, action="append", help="size budgets (default: 12, 20, 30)")
    parser.add_argument("--latency-fraction", type=float, default=0.6, help="latency budget / dense int8 p50")
    parser.add_argument("--recipes", default="int8,int8-emb4,int4", help="the recipe ladder of both searches")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per benchmark")
    parser.add_argument("--skip-grid", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    recipes = tuple(args.recipes.split(","))
    print(f"torch threads {torch.get_num_threads()}, benchmark threads {load_profile('host').threads}, "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}", file=sys.stderr)

    dense_p50 = dense_int8_p50(args.runs)
    budgets = [(f"{mb:g} MB", Budget(max_mb=mb)) for mb in (args.max_mb or [12.0, 20.0, 30.0])]
    latency = round(dense_p50 * args.latency_fraction, 2)
    budgets.append((f"p50 <= {latency} ms", Budget(max_latency_ms=latency)))

    fits = {}
    for name, budget in budgets:
        print(f"fit for {name} ...", file=sys.stderr)
        fits[name] = run_fit(budget, recipes, args.runs)
    grid_wall, grid_count, grid = (0.0, 0, {}) if args.skip_grid else run_grid(recipes, args.runs, budgets)

    header = ("budget", "fit s", "fit built", "fit result", "fit val / test", "grid val / test", "grid s", "grid built")
    rows = [header]
    for name, _ in budgets:
        mine, theirs = fits[name], grid.get(name)
        rows.append((name, f"{mine['wall_s']:.0f}", str(mine["candidates_built"]),
                     f"{mine['recipe']} -{mine['heads_removed']} {mine['file_mb']:.2f} MB {mine['p50_ms']:.1f} ms"
                     + ("" if mine["status"] == "fit" else " (not met)"),
                     f"{100 * mine['validation']:.2f} / {100 * mine['test']:.2f}",
                     "-" if not theirs else f"{100 * theirs['validation']:.2f} / {100 * theirs['test']:.2f}",
                     f"{grid_wall:.0f}", str(grid_count)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"dense_int8_p50_ms": dense_p50, "recipes": recipes, "fits": fits, "grid": grid,
              "grid_wall_s": round(grid_wall, 1), "grid_candidates": grid_count,
              "threads": load_profile("host").threads, "cpus": os.cpu_count()}
    (args.out / "fit_search.json").write_text(json.dumps(to_jsonable(record), indent=2) + "\n")
    print(f"wrote {args.out / 'fit_search.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
