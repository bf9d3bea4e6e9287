"""Recovery settings for fit, measured where they matter: after the recipe, through the runtime (issue 16: a
5 MB fit within a point; the structures fit builds there lose up to 3 points to int4 after recovery).

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/recovery_settings.py [--shape 12,0.5,2]
        [--variants 2e-5:150,5e-5:150,5e-5:300] [--recipe int4] [--out benchmarks/results]

The structure is the one fit builds for the shape (heads removed, FFN fraction, layers removed: a
`CandidateBuilder` of `minilm-bbc` with fit's default options makes it). Each variant (learning rate : steps)
distils it from the pruned weights with fit's other settings (bfloat16 where the CPU has it, the teacher's
outputs kept across variants), then it is quantized with the recipe, exported and evaluated through ExecuTorch.
Prints a table with validation and test accuracy in PyTorch and through the runtime; writes recovery_settings.json.
"""

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from recovery_qat import fit_recovery_config
from torch import nn

from edgeprune import bundled_task, export, load_artifact
from edgeprune.devices import load_profile
from edgeprune.progress import Progress
from edgeprune.quantize import RECIPES
from edgeprune.recovery import DistillData, distill
from edgeprune.recovery.teacher_outputs import TeacherOutputs
from edgeprune.search.benchmarkers import this_machine
from edgeprune.search.builder import CandidateBuilder
from edgeprune.search.journal import Journal
from edgeprune.search.options import FitOptions
from edgeprune.search.scoring import journaled_head_scores, normalization
from edgeprune.search.shared import SharedWork, dense_head_means
from edgeprune.search.space import Shape
from edgeprune.tasks.base import batched_quality


def fit_structure(task, teacher, shape: Shape, work: Path) -> nn.Module:  # noqa: ANN001 - a Task, its Teacher
    """The teacher cut to `shape` as fit cuts it (default options: scores chosen by measurement, compensation)."""
    options = FitOptions()
    journal = Journal(work / "journal.jsonl", {"benchmark": "recovery_settings"}, resume=False)
    shared = SharedWork()
    means = dense_head_means(teacher.model, task, options, shared)  # as fit scores and prunes
    raw = journaled_head_scores(task, teacher.model, options, Progress(enabled=False), journal, shared,
                                teacher.validation, means)
    builder = CandidateBuilder(teacher.model, raw.normalize_per_layer(normalization(raw, options)), task, options,
                               work, Progress(enabled=False), "executorch", load_profile("host"),
                               this_machine(options), journal, shared=shared, means=means)
    return builder.facts.pruned(shape)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="12,0.5,2", help="heads removed, FFN fraction, layers removed")
    parser.add_argument("--variants", default="2e-5:150,5e-5:150,1e-4:150,5e-5:300",
                        help="learning rate:steps, comma-separated")
    parser.add_argument("--recipe", default="int4")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    heads, ffn, layers = args.shape.split(",")
    shape = Shape(int(heads), float(ffn), int(layers))
    variants = [(float(lr), int(steps)) for lr, steps in (v.split(":") for v in args.variants.split(","))]
    recipe = RECIPES.get(args.recipe)
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher()
    options = FitOptions()
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgeprune-recovery-settings-") as scratch:
        work = Path(scratch)
        pruned = fit_structure(task, teacher, shape, work)
        data = DistillData.from_task(task, options.recovery_batch_size or task.recovery_batch_size, task.seed)
        kept = TeacherOutputs(teacher.model)
        example = task.example_inputs("validation", 1)[0]
        for index, (learning_rate, steps) in enumerate(variants):
            student = copy.deepcopy(pruned)
            started = time.perf_counter()
            result = distill(student, teacher.model, data,
                             fit_recovery_config(task, steps, learning_rate=learning_rate), Progress(interval_s=60),
                             kept)
            seconds = time.perf_counter() - started
            student.eval()
            artifact = export(student, example, work / f"variant{index}.pte", recipe,
                              verify_on=task.example_inputs("validation", 8), keep_rejected=True)
            run = load_artifact(artifact.path)
            row = {"learning_rate": learning_rate, "steps": steps, "recovery_s": round(seconds, 1),
                   "precision": result.precision, "best_step": result.best_step,
                   "pytorch_validation": batched_quality(task, student, "validation").value,
                   "pytorch_test": batched_quality(task, student, "test").value,
                   "file_mb": round(artifact.size_bytes / 1e6, 3),
                   "runtime_validation": task.runtime_quality(run, "validation").value,
                   "runtime_test": task.runtime_quality(run, "test").value}
            rows.append(row)
            print(row, file=sys.stderr)
    dense = teacher.test.value
    print(f"{shape.describe()}, recipe {args.recipe}; dense test {dense:.2%} (PyTorch); torch threads "
          f"{torch.get_num_threads()}, {os.cpu_count()} CPUs")
    print(f"{'lr':>7} {'steps':>5} {'s':>6} {'val % fp32':>10} {'test % fp32':>11} {'val % rt':>9} {'test % rt':>9} "
          f"{'test vs dense':>13}")
    for row in rows:
        print(f"{row['learning_rate']:>7.0e} {row['steps']:>5} {row['recovery_s']:>6.1f} "
              f"{row['pytorch_validation']:>10.2%} {row['pytorch_test']:>11.2%} {row['runtime_validation']:>9.2%} "
              f"{row['runtime_test']:>9.2%} {(row['runtime_test'] - dense) * 100:>+12.2f}pt")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "recovery_settings.json"
    path.write_text(json.dumps({"shape": shape.key, "recipe": args.recipe, "dense_test_pytorch": dense,
                                "torch_threads": torch.get_num_threads(), "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
