"""The fit search against an exhaustive grid over the same space, on `minilm-bbc` and `host`.

    .venv/bin/python benchmarks/fit_search.py [--max-mb 12 --max-mb 20 --max-mb 30] [--latency-fraction 0.6]
        [--recipes int8,int4] [--ffn-fractions 0,0.5] [--layer-removals 0,1] [--head-step 33]
        [--out benchmarks/results]

For each budget (file sizes, and a latency budget at a fraction of the dense int8 p50 measured first),
a full `fit` runs from a cold cache: time to result, candidates built, validation and test quality of
the result. The grid builds every candidate of the same space — recipe × vocabulary (full, trimmed) ×
FFN fraction × layers removed × heads removed — once, from a cold cache (export, verify, validation
quality, benchmark on host), then picks per budget the best validation quality that meets it. Both use
the same benchmark settings; the machine's thread count is printed. Run nothing else meanwhile.
"""

import argparse
import functools
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


def describe(artifact) -> str:  # noqa: ANN001 - a BuiltArtifact
    return f"{artifact.recipe.name}, {artifact.describe()}"


def run_fit(budget: Budget, options: FitOptions) -> dict:
    from edgeprune.search.fit import fit

    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        result = fit(cold_task(Path(scratch) / "cache"), device="host", budget=budget, out=Path(scratch) / "fit",
                     options=options)
        wall = time.perf_counter() - started
    fitted = result.fitted
    return {"wall_s": round(wall, 1), "candidates_built": len(result.candidates), "status": result.status,
            "candidate": describe(fitted), "file_mb": fitted.file_bytes / 1e6,
            "p50_ms": fitted.benchmark.p50_ms, "validation": fitted.validation_quality.value,
            "test": fitted.quality.value, "timings_s": result.timings_s,
            "built": [f"{t.recipe}, {t.describe()}" for t in result.trials if t.file_bytes is not None]}


def run_grid(options: FitOptions, budgets: list[tuple[str, Budget]]) -> tuple[float, int, dict]:
    """Every candidate of the space, then the best per budget; returns wall time, count and the winners."""
    from edgeprune.devices.transports.base import open_transport
    from edgeprune.export import load_artifact
    from edgeprune.quantize import RECIPES
    from edgeprune.search.benchmarkers import DeviceBenchmarker
    from edgeprune.search.builder import CandidateBuilder
    from edgeprune.search.choice import choose, quality_tolerance
    from edgeprune.search.fit import journaled_head_scores, vocabulary_for
    from edgeprune.search.journal import Journal
    from edgeprune.search.space import lines
    from edgeprune.tasks import Quality

    profile = load_profile("host")
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        started = time.perf_counter()
        task = cold_task(work / "cache")
        teacher = task.teacher()
        journal = Journal(work / "journal.jsonl", {"grid": True}, resume=False)
        quiet = Progress(enabled=False)
        scores = journaled_head_scores(task, teacher.model, options, quiet, journal).normalize_per_layer(
            options.normalize)
        vocabulary = vocabulary_for(task, options, Progress(enabled=False))
        reference: Quality = teacher.validation
        with open_transport(profile.endpoint, profile.python) as link:
            builder = CandidateBuilder(teacher.model, scores, task, options, work, Progress(), "executorch", profile,
                                       DeviceBenchmarker(link, profile, options), journal, vocabulary)
            space = lines(options.recipes, options.ffn_fractions, builder.layer_counts, (False, True))
            built = [builder.candidate(RECIPES.get(line.recipe), line.shape(count), Budget(), reference)
                     for line in space for count in builder.head_counts(line.layers_removed)]
        wall = time.perf_counter() - started
        winners: dict = {"every candidate": [
            {"candidate": describe(c), "file_mb": c.file_bytes / 1e6, "p50_ms": c.benchmark.p50_ms,
             "validation": c.validation_quality.value, "core_parameters": c.core_parameters} for c in built]}
        tolerance = quality_tolerance(options, reference)
        for name, budget in budgets:  # the same choice fit makes (ties within the tolerance: least compressed)
            for c in built:
                c.checks = budget.check(c.file_bytes, c.benchmark, c.validation_quality, reference)
            best, binding, _ = choose(built, budget, reference, tolerance)
            if binding:
                winners[name] = None
                continue
            trimmed = best.vocabulary_size is not None
            test = task.runtime_quality(load_artifact(work / best.path), "test",
                                        functools.partial(builder.artifacts.remap, trimmed=True) if trimmed
                                        else None).value
            winners[name] = {"candidate": describe(best), "file_mb": best.file_bytes / 1e6,
                             "p50_ms": best.benchmark.p50_ms, "validation": best.validation_quality.value,
                             "test": test}
    return wall, len(built), winners


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-mb", type=float, action="append", help="size budgets (default: 12, 20, 30)")
    parser.add_argument("--latency-fraction", type=float, default=0.6, help="latency budget / dense int8 p50")
    parser.add_argument("--recipes", default="int8,int4", help="the recipe ladder of both searches")
    parser.add_argument("--ffn-fractions", default="0,0.5", help="FFN fractions of the space")
    parser.add_argument("--layer-removals", default="0,1", help="layer counts of the space")
    parser.add_argument("--head-step", type=int, default=33, help="heads removed go in multiples of this")
    parser.add_argument("--runs", type=int, default=30, help="timed runs per benchmark")
    parser.add_argument("--skip-grid", action="store_true")
    parser.add_argument("--recover-steps", default="auto", help="fit's recovery: auto (its default), 0 (off, as the "
                        "grid builds) or a step count")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    recipes = tuple(args.recipes.split(","))
    recover = args.recover_steps if args.recover_steps == "auto" else int(args.recover_steps)
    options = FitOptions(recipes=recipes, bench_runs=args.runs, head_step=args.head_step, trim_vocabulary=None,
                         recover_steps=recover,
                         ffn_fractions=tuple(float(f) for f in args.ffn_fractions.split(",")),
                         layer_removals=tuple(int(n) for n in args.layer_removals.split(",")))
    print(f"torch threads {torch.get_num_threads()}, benchmark threads {load_profile('host').threads}, "
          f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}", file=sys.stderr)

    dense_p50 = dense_int8_p50(args.runs)
    budgets = [(f"{mb:g} MB", Budget(max_mb=mb)) for mb in (args.max_mb or [12.0, 20.0, 30.0])]
    latency = round(dense_p50 * args.latency_fraction, 2)
    budgets.append((f"p50 <= {latency} ms", Budget(max_latency_ms=latency)))

    fits = {}
    for name, budget in budgets:
        print(f"fit for {name} ...", file=sys.stderr)
        fits[name] = run_fit(budget, options)
        print(json.dumps(fits[name]), file=sys.stderr)
    grid_wall, grid_count, grid = (0.0, 0, {}) if args.skip_grid else run_grid(options, budgets)

    header = ("budget", "fit s", "fit built", "fit result", "fit val / test", "grid result", "grid val / test",
              "grid s", "grid built", "fit/grid time")
    rows = [header]
    for name, _ in budgets:
        mine, theirs = fits[name], grid.get(name)
        rows.append((name, f"{mine['wall_s']:.0f}", str(mine["candidates_built"]),
                     f"{mine['candidate']}; {mine['file_mb']:.2f} MB {mine['p50_ms']:.1f} ms"
                     + ("" if mine["status"] == "fit" else " (not met)"),
                     f"{100 * mine['validation']:.2f} / {100 * mine['test']:.2f}",
                     "-" if not theirs else theirs["candidate"],
                     "-" if not theirs else f"{100 * theirs['validation']:.2f} / {100 * theirs['test']:.2f}",
                     f"{grid_wall:.0f}", str(grid_count), f"{mine['wall_s'] / grid_wall:.2f}" if grid_wall else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"dense_int8_p50_ms": dense_p50, "space": to_jsonable(options), "fits": fits, "grid": grid,
              "grid_wall_s": round(grid_wall, 1), "grid_candidates": grid_count,
              "threads": load_profile("host").threads, "cpus": os.cpu_count()}
    (args.out / "fit_search.json").write_text(json.dumps(to_jsonable(record), indent=2) + "\n")
    print(f"wrote {args.out / 'fit_search.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
