"""ExecuTorch lowering time with torchao's quantize ops answered from the shape cache
(edgeprune/export/quant_op_shapes.py) and without it, on the bundled models, side by side in one run.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/lowering_time.py [--rounds 1] [--skip-decoder]

For each case (MiniLM `int8`; SmolLM2-135M's KV-cached generator at `int4-decoder-all`, context 256) it quantizes
the model with the recipe and lowers it `--rounds` times each way, alternating (without, with, without, ...), each
a fresh quantized copy, and checks the two programs are byte-identical. Prints the median
seconds of each and their ratio, and writes benchmarks/results/lowering_time.json. One torch thread (lowering is
Python); run nothing else meanwhile. SmolLM2's lowerings take minutes each.
"""

import argparse
import contextlib
import hashlib
import importlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeprune import bundled_task  # noqa: E402
from edgeprune.progress import Progress  # noqa: E402
from edgeprune.quantize import CALIBRATION_EXAMPLES, any_recipe, quantize  # noqa: E402

# ExecutorchRuntime's module by path: `import edgeprune.export.executorch as ...` resolves `executorch` to the
# library inside edgeprune.export's namespace
EXECUTORCH = importlib.import_module("edgeprune.export.executorch")
CASES = (("minilm-bbc", "int8"), ("smollm2-bbc", "int4-decoder-all"))


def lower_once(task, recipe_name: str, cached: bool) -> tuple[float, bytes]:
    recipe = any_recipe(recipe_name)
    calibration = task.example_inputs("calibration", CALIBRATION_EXAMPLES) if recipe.needs_calibration else None
    prepared = quantize(task.dense_model(), recipe, calibration=calibration)
    example = task.example_inputs("validation", 1)[0]
    switch = EXECUTORCH.quant_op_shapes_cached
    if not cached:  # the module-level name the lowering enters: swapped for a block that does nothing
        EXECUTORCH.quant_op_shapes_cached = contextlib.nullcontext
    try:
        start = time.perf_counter()
        data = EXECUTORCH.ExecutorchRuntime().lower(prepared, example, recipe)
        return time.perf_counter() - start, data
    finally:
        EXECUTORCH.quant_op_shapes_cached = switch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="lowerings each way per case")
    parser.add_argument("--skip-decoder", action="store_true", help="MiniLM only (SmolLM2's take minutes each)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch threads: {torch.get_num_threads()}; {platform.processor() or platform.machine()}", flush=True)
    rows = []
    for task_name, recipe_name in CASES:
        if args.skip_decoder and task_name != "minilm-bbc":
            continue
        options = {"context": 256} if task_name == "smollm2-bbc" else {}
        task = bundled_task(task_name, progress=Progress(enabled=False), **options)
        seconds: dict[bool, list[float]] = {False: [], True: []}
        digests: set[str] = set()
        for _ in range(args.rounds):
            for cached in (False, True):
                elapsed, data = lower_once(task, recipe_name, cached)
                seconds[cached].append(elapsed)
                digests.add(hashlib.sha256(data).hexdigest())
                print(f"  {task_name} {recipe_name} {'cached' if cached else 'plain '} {elapsed:7.1f} s "
                      f"{len(data):,} bytes", flush=True)
        plain, cached = statistics.median(seconds[False]), statistics.median(seconds[True])
        rows.append({"task": task_name, "recipe": recipe_name, "plain_s": seconds[False], "cached_s": seconds[True],
                     "median_plain_s": round(plain, 2), "median_cached_s": round(cached, 2),
                     "ratio": round(plain / cached, 3), "identical_programs": len(digests) == 1})
    print(f"\n{'task':<12} {'recipe':<17} {'plain s':>8} {'cached s':>9} {'ratio':>6}  identical")
    for row in rows:
        print(f"{row['task']:<12} {row['recipe']:<17} {row['median_plain_s']:>8.1f} {row['median_cached_s']:>9.1f} "
              f"{row['ratio']:>6.2f}  {row['identical_programs']}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "lowering_time.json"
    path.write_text(json.dumps({"version": 1, "torch_threads": torch.get_num_threads(), "rounds": args.rounds,
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}")
    return 0 if all(row["identical_programs"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
