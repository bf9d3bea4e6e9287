"""What a recovery inside fit costs, and what the teacher's kept outputs and bfloat16 training save (issue 16: a fit
within 15 minutes; recovery was 21 of a 5 MB fit's 27 minutes).

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/recovery_speed.py [--heads 42] [--ffn 0.5]
        [--steps 150] [--out benchmarks/results]

One structure of `minilm-bbc` (as `recovery_qat.py` builds it), recovered with fit's settings four ways, one after
the other in one process:
  float32, teacher every step    the teacher runs on every batch and every validation pass (before kept outputs);
  float32, outputs kept (first)  a fresh `TeacherOutputs`: what the first recovery of a fit pays;
  float32, outputs kept (later)  the same `TeacherOutputs` again: every later recovery of the fit;
  bfloat16, outputs kept         the student trained under bfloat16 autocast (float32 weights), outputs kept.
The float32 rows must end with identical weights (checked and printed). The first and last are exported with the
`int4` recipe and evaluated through ExecuTorch, as fit would ship them. Prints a table; writes recovery_speed.json.
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
from recovery_qat import fit_recovery_config, pruned_structure, structure_arguments, through_runtime

from edgeprune import bundled_task
from edgeprune.progress import Progress
from edgeprune.recovery import DistillData, distill
from edgeprune.recovery.precision import cpu_has_bfloat16
from edgeprune.recovery.teacher_outputs import TeacherOutputs
from edgeprune.tasks.base import batched_quality


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    structure_arguments(parser)
    parser.add_argument("--no-runtime", action="store_true", help="skip the int4 exports")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher()
    pruned = pruned_structure(task, teacher, args.heads, args.ffn, args.examples)
    data = DistillData.from_task(task, 16, task.seed)
    kept = TeacherOutputs(teacher.model)
    ways = [("float32, teacher every step", "float32", TeacherOutputs(teacher.model, max_bytes=0)),
            ("float32, outputs kept (first)", "float32", kept),
            ("float32, outputs kept (later)", "float32", kept),
            ("bfloat16, outputs kept", "bfloat16", kept)]
    print(f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs, native bfloat16: {cpu_has_bfloat16()}",
          file=sys.stderr)
    rows, weights = [], {}
    with tempfile.TemporaryDirectory(prefix="edgeprune-recovery-speed-") as folder:
        for index, (name, precision, outputs) in enumerate(ways):
            student = copy.deepcopy(pruned)
            misses = outputs.misses
            started = time.perf_counter()
            result = distill(student, teacher.model, data, fit_recovery_config(task, args.steps, precision=precision),
                             Progress(interval_s=60), outputs)
            seconds = time.perf_counter() - started
            student.eval()
            weights[name] = {k: v.clone() for k, v in student.state_dict().items()}
            row = {"way": name, "precision": result.precision, "recovery_s": round(seconds, 1),
                   "teacher_forwards": outputs.misses - misses, "steps": result.steps, "best_step": result.best_step,
                   "pytorch_validation": batched_quality(task, student, "validation").value,
                   "pytorch_test": batched_quality(task, student, "test").value}
            if not args.no_runtime and index in (0, len(ways) - 1):
                row.update(through_runtime(student, task, Path(folder), f"way{index}"))
            rows.append(row)
            print(row, file=sys.stderr)
    reference = weights[ways[0][0]]
    identical = {name: all(torch.equal(value, reference[key]) for key, value in state.items())
                 for name, state in weights.items() if name.startswith("float32")}
    print(f"{args.heads} of 72 heads removed, FFN -{args.ffn:.0%}, {args.steps} steps, batches of 16 × 128 tokens; "
          f"dense test {teacher.test.value:.2%}; torch threads {torch.get_num_threads()}")
    print(f"{'recovery':<31} {'s':>6} {'teacher fwd':>11} {'val % fp32':>10} {'test % fp32':>11} "
          f"{'val % int4':>10} {'test % int4':>11}")
    for row in rows:
        runtime = (f"{row['validation']:>10.2%} {row['test']:>11.2%}" if "validation" in row
                   else f"{'':>10} {'':>11}")
        print(f"{row['way']:<31} {row['recovery_s']:>6.1f} {row['teacher_forwards']:>11} "
              f"{row['pytorch_validation']:>10.2%} {row['pytorch_test']:>11.2%} {runtime}")
    print("float32 weights identical to the first row's: " + ", ".join(f"{k}: {v}" for k, v in identical.items()))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "recovery_speed.json"
    path.write_text(json.dumps({"heads_removed": args.heads, "ffn_removed": args.ffn, "steps": args.steps,
                                "dense_test_pytorch": teacher.test.value, "torch_threads": torch.get_num_threads(),
                                "native_bfloat16": cpu_has_bfloat16(), "float32_identical": identical,
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
