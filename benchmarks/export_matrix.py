"""Every recipe × runtime on dense and 50 %-heads-pruned `minilm-bbc`: size, predicted size, latency at 1
and 2 threads, peak memory, accuracy through the runtime, fidelity to PyTorch, export time.

    .venv/bin/python benchmarks/export_matrix.py [--recipes int8,litert-int8] [--part NAME] [--out benchmarks/results]

A run over some recipes can be kept apart with --part: it writes export_matrix-NAME.json.
--trim-vocabulary adds the dense model with its vocabulary trimmed to the tokens of the calibration and
validation splits (inputs go through the id map; test tokens outside it read as [UNK]).

The size model is calibrated on each recipe's dense export and then predicts the pruned one, as the
fit loop uses it. Latency: each artifact in its own process, 5 warm-up and --runs timed runs; run
nothing else meanwhile.
"""

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

from edgeprune import bundled_task, plan_global_topk, score_heads
from edgeprune.bench import benchmark_local
from edgeprune.export import export, load_artifact
from edgeprune.progress import Progress
from edgeprune.pruning import apply_plan
from edgeprune.quantize import CALIBRATION_EXAMPLES, RECIPES, SizeModel, any_recipe
from edgeprune.quantize.vocabulary import trim_vocabulary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", default=",".join(RECIPES.names()))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--part", default="", help="suffix of the JSON file, for a run split into parts")
    parser.add_argument("--trim-vocabulary", action="store_true", help="add the dense model, vocabulary trimmed")
    args = parser.parse_args()
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    scores = score_heads(teacher, task.batches("calibration", 16, limit=256), "gate-gradient")
    pruned = apply_plan(copy.deepcopy(teacher), plan_global_topk(scores.normalize_per_layer(), 36))
    models = [("dense", teacher, None), ("50% heads", pruned, None)]
    if args.trim_vocabulary:
        vocabulary = task.vocabulary()
        models.append(("dense, trimmed vocab", trim_vocabulary(copy.deepcopy(teacher), vocabulary), vocabulary))
    work = args.out / "export_matrix"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.recipes.split(","):
        recipe = any_recipe(name)  # registered, or one of UNVERIFIED_RECIPES to re-measure
        sizes = SizeModel()
        for label, model, vocabulary in models:
            def remap(inputs: tuple[torch.Tensor, ...], vocabulary=vocabulary) -> tuple[torch.Tensor, ...]:
                return inputs if vocabulary is None else (vocabulary.apply(inputs[0]), *inputs[1:])

            example = remap(task.example_inputs("validation", 1)[0])
            verify_inputs = [remap(i) for i in task.example_inputs("validation", 8)]
            # real inputs at the export shape, read by calibrated recipes only
            calibration = [remap(i) for i in task.example_inputs("calibration", CALIBRATION_EXAMPLES)]
            predicted = sizes.predict(model, recipe)
            suffix = ".pte" if recipe.runtime == "executorch" else ".tflite"
            path = work / f"{name}-{label.replace('%', '').replace(',', '').replace(' ', '-')}{suffix}"
            started = time.perf_counter()
            artifact = export(model, example, path, recipe,
                              calibration=calibration if recipe.needs_calibration else None,
                              verify_on=verify_inputs, name=name, keep_rejected=True)
            export_s = time.perf_counter() - started  # quantizing (and calibrating) and verifying included
            if label == "dense":
                sizes.observe(model, recipe, artifact.size_bytes)
            check = artifact.verification
            row = {"recipe": name, "runtime": recipe.runtime, "model": label, "file_mb": artifact.size_bytes / 1e6,
                   "predicted_mb": predicted / 1e6, "size_error_pct": 100 * (predicted / artifact.size_bytes - 1),
                   "export_s": export_s, "tolerance_cosine": recipe.min_cosine,
                   "cosine_to_pytorch": check.min_cosine, "accepted": check.passed}
            if not check.passed:
                row["rejection"] = f"cosine {check.min_cosine:.6f} < {recipe.min_cosine}"
            program = load_artifact(path)
            row["test_accuracy"] = task.runtime_accuracy(lambda *inputs, run=program: run(*remap(inputs)), "test")
            for threads in (1, 2):
                bench = benchmark_local(path, example, threads, recipe.runtime, runs=args.runs)
                row[f"p50_ms_{threads}t"], row[f"p90_ms_{threads}t"] = bench.p50_ms, bench.p90_ms
                row[f"peak_rss_mb_{threads}t"] = bench.peak_rss_mb
                row[f"added_mb_{threads}t"] = bench.peak_rss_mb - bench.rss_before_load_mb
            rows.append(row)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}),
                  file=sys.stderr)
            path.unlink()
    header = ("recipe", "model", "file MB", "pred MB", "err %", "cos", "acc %", "p50 1t", "p90 1t", "p50 2t",
              "p90 2t", "added MB", "export s")
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in rows:
        cos = "rejected" if not r["accepted"] else f"{r['cosine_to_pytorch']:.4f}"
        print(" | ".join([r["recipe"], r["model"], f"{r['file_mb']:.2f}",
                          f"{r['predicted_mb']:.2f}" if r["model"] != "dense" else "(calibrates)",
                          f"{r['size_error_pct']:+.1f}" if r["model"] != "dense" else "",
                          cos, f"{100 * r['test_accuracy']:.2f}", f"{r['p50_ms_1t']:.1f}", f"{r['p90_ms_1t']:.1f}",
                          f"{r['p50_ms_2t']:.1f}", f"{r['p90_ms_2t']:.1f}", f"{r['added_mb_2t']:.0f}",
                          f"{r['export_s']:.0f}"]))
    path = args.out / (f"export_matrix-{args.part}.json" if args.part else "export_matrix.json")
    path.write_text(json.dumps({"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "runs": args.runs,
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
