"""Recovery by distillation on `minilm-bbc`: one-shot pruning vs one-shot + distillation vs iterative + distillation.

    .venv/bin/python benchmarks/recovery.py [--ratios 0.25,0.5,0.625,0.75] [--max-steps 300] [--out benchmarks/results]
    .venv/bin/python benchmarks/recovery.py --quick     # tiny settings: proves the pipeline runs, numbers mean little

For each share of the 72 heads removed: heads are scored on calibration documents as fit scores them (`auto`:
fluctuation or Taylor chosen by measurement, with the chosen normalization; or `--criterion NAME`, normalized per
layer), chosen globally, and removed with their mean outputs folded into the biases (fit's compensation;
`--no-compensation` removes them outright), then
  one-shot    the pruned model as it is;
  recovered   the same model distilled from the dense teacher (calibration split, early stop on validation);
  iterative   `steps` rounds of score → remove a share → distill, with the same total step budget (Taylor or the
              named criterion, no compensation; `--iterative-steps 0` skips it).
Reports test accuracy, mean embedding cosine to the dense model on the test split (never used for scoring or
recovery) and the wall time of recovery. Prints a table; writes recovery.json (recovery-quick.json with --quick).
"""

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch
from split_quality import dense_test_embeddings, evaluate

from edgeprune import bundled_task, plan_global_topk, prune, score_heads
from edgeprune.progress import Progress
from edgeprune.recovery import DistillConfig, DistillData, distill
from edgeprune.recovery.schedules import prune_and_recover
from edgeprune.search.scoring import measured_head_scores, scoring_decision
from edgeprune.tasks.base import input_batches

TOTAL_HEADS = 72


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ratios", default="0.25,0.5,0.625,0.75", help="shares of heads to remove")
    parser.add_argument("--criterion", default="auto", help="auto (as fit chooses) or a criterion name")
    parser.add_argument("--no-compensation", action="store_true", help="remove heads outright")
    parser.add_argument("--examples", type=int, default=256, help="calibration documents for scoring")
    parser.add_argument("--max-steps", type=int, default=300, help="distillation steps per model (all rounds)")
    parser.add_argument("--max-seconds", type=float, help="distillation time budget per model")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--iterative-steps", type=int, default=4)
    parser.add_argument("--train-limit", type=int, help="calibration documents used for distillation")
    parser.add_argument("--validation-limit", type=int, help="validation documents for early stopping")
    parser.add_argument("--test-limit", type=int, help="test documents evaluated (default: all)")
    parser.add_argument("--quick", action="store_true", help="tiny settings, to check that everything runs")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    if args.quick:
        args.ratios, args.examples, args.max_steps, args.eval_every = "0.5", 32, 4, 2
        args.iterative_steps, args.train_limit, args.validation_limit, args.test_limit = 2, 64, 32, 64
    ratios = [float(r) for r in args.ratios.split(",")]
    torch.manual_seed(0)
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    test_size = task.splits.sizes()["test"]
    if test_size < 600 and not args.quick:
        print(f"warning: the test split has only {test_size} documents", file=sys.stderr)
    teacher = task.teacher().model
    with torch.no_grad():
        dense_embeddings = dense_test_embeddings(teacher, task, args.test_limit)
    dense_accuracy, _ = evaluate(teacher, task, dense_embeddings, args.test_limit)
    data = DistillData.from_task(task, args.batch_size, seed=0, train_limit=args.train_limit,
                                 validation_limit=args.validation_limit)
    config = DistillConfig(learning_rate=args.learning_rate, max_steps=args.max_steps, max_seconds=args.max_seconds,
                           eval_every=args.eval_every, patience=args.patience,
                           warmup_steps=min(20, max(1, args.max_steps // 10)))
    progress = Progress(interval_s=30)

    def scoring():
        return task.batches("calibration", 16, limit=args.examples)

    rows = [{"method": "dense", "ratio": 0.0, "heads_removed": 0, "accuracy": dense_accuracy, "cosine": 1.0,
             "recovery_seconds": 0.0}]
    print(f"torch threads: {torch.get_num_threads()}; test documents {len(dense_embeddings)}; "
          f"dense test accuracy {dense_accuracy:.4f}", file=sys.stderr)
    if args.criterion == "auto":
        scores = measured_head_scores(task, teacher, task.teacher().validation, args.examples,
                                      compensate=not args.no_compensation)
        decision = scoring_decision(scores)
        scores = scores.normalize_per_layer(decision.choice.normalize)
        print(f"scoring: {decision.describe()}", file=sys.stderr)
    else:
        scores = score_heads(teacher, scoring(), args.criterion).normalize_per_layer()
    inputs = input_batches(task, "calibration", 16, limit=args.examples)
    for ratio in ratios:
        remove = round(ratio * TOTAL_HEADS)
        model = prune(copy.deepcopy(teacher), plan_global_topk(scores, remove), inputs,
                      compensate=not args.no_compensation)
        accuracy, cosine = evaluate(model, task, dense_embeddings, args.test_limit)
        rows.append({"method": "one-shot", "ratio": ratio, "heads_removed": remove, "accuracy": accuracy,
                     "cosine": cosine, "recovery_seconds": 0.0})
        started = time.perf_counter()
        result = distill(model, teacher, data, config, progress)
        seconds = time.perf_counter() - started
        accuracy, cosine = evaluate(model, task, dense_embeddings, args.test_limit)
        rows.append({"method": "one-shot + distill", "ratio": ratio, "heads_removed": remove, "accuracy": accuracy,
                     "cosine": cosine, "recovery_seconds": seconds, "steps": result.steps, "stopped": result.stopped,
                     "best_step": result.best_step, "validation_accuracy": result.best_metric})
        if args.iterative_steps:
            criterion = "taylor" if args.criterion == "auto" else args.criterion
            outcome = prune_and_recover(copy.deepcopy(teacher), teacher, data, remove, "iterative",
                                        args.iterative_steps, config, criterion, scoring_batches=scoring,
                                        progress=progress)
            accuracy, cosine = evaluate(outcome.model, task, dense_embeddings, args.test_limit)
            rows.append({"method": f"iterative ({args.iterative_steps}) + distill", "ratio": ratio,
                         "heads_removed": outcome.plan.heads_removed, "accuracy": accuracy, "cosine": cosine,
                         "recovery_seconds": outcome.recovery_seconds, "total_seconds": outcome.seconds,
                         "steps": sum(d.steps for d in outcome.distillations)})
        for row in rows[-3 if args.iterative_steps else -2:]:
            print(f"{row['method']:>28} {ratio:.3f}: acc {row['accuracy']:.4f} cos {row['cosine']:.4f} "
                  f"({row['recovery_seconds']:.1f} s)", file=sys.stderr)

    print(f"{'method':<30} {'removed':>8} {'test acc %':>10} {'cosine':>8} {'recovery s':>10}")
    for row in rows:
        print(f"{row['method']:<30} {row['ratio'] * 100:>7.1f}% {row['accuracy'] * 100:>10.2f} "
              f"{row['cosine']:>8.4f} {row['recovery_seconds']:>10.1f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("recovery-quick.json" if args.quick else "recovery.json")
    path.write_text(json.dumps({"torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                                "criterion": args.criterion, "compensation": not args.no_compensation,
                                "head_scores": scores.to_dict(), "examples": args.examples,
                                "test_documents": len(dense_embeddings), "config": config.to_dict(),
                                "batch_size": args.batch_size, "iterative_steps": args.iterative_steps,
                                "quick": args.quick, "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
