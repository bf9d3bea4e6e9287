"""Head-importance criteria on `minilm-bbc`, one-shot (no recovery): quality after removing 25/50/75 % of heads.

    .venv/bin/python benchmarks/criteria.py [--examples 256] [--oracle-examples 64] [--out benchmarks/results]
        [--criteria 'fluctuation:normalize=none;activation-norm:projected=false'] [--normalize l2,zscore,none]
        [--compensation off,on] [--no-random] [--no-oracle] [--torch-pruning] [--json criteria.json]

For every registered criterion (or those of --criteria, each optionally with `:key=value,...` options),
random selection (mean of 5 seeds) and greedy leave-one-out (the oracle: re-scored after every step of one
head per layer), prints test accuracy, mean embedding cosine to the dense model, and the criterion's wall
time. Scores are normalized per layer (each method of --normalize) and heads are chosen globally, at least
one per layer. With `--compensation on`, removed heads' mean outputs (measured once on the calibration data)
are folded into the output-projection biases (edgeprune.pruning.compensation). With `--torch-pruning`,
Torch-Pruning's one-shot head removal (group magnitude and group Taylor importance, global, no compensation;
benchmarks/torch_pruning_reference.py, dev dependency `torch-pruning`) is measured beside them as a reference.
Scoring uses calibration data; quality is the test split.
"""

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from split_quality import dense_test_embeddings, evaluate
from torch_pruning_reference import IMPORTANCES, torch_pruning_heads

from edgeprune import HeadScores, bundled_task, plan_global_topk, score_heads
from edgeprune.importance import CRITERIA
from edgeprune.progress import Progress
from edgeprune.pruning import apply_plan, iterative_prune, measure_head_means

RATIOS = (0.25, 0.5, 0.75)


def criterion_spec(text: str) -> tuple[str, dict[str, object]]:
    """"name" or "name:key=value,key=value" (values true/false, numbers or strings) -> (name, options).

    The keys `normalize` and `compensation` (values joined by "|", e.g. `normalize=none|l2`) override
    --normalize and --compensation for this criterion; the other keys go to the criterion."""
    name, _, rest = text.partition(":")
    options: dict[str, object] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        lowered = value.lower()
        if lowered in ("true", "false"):
            options[key] = lowered == "true"
        else:
            try:
                options[key] = float(value) if "." in value else int(value)
            except ValueError:
                options[key] = value
    return name, options


def comma_list(text: str) -> list[str]:
    return [t for t in text.split(";" if ";" in text or ":" in text else ",") if t]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=256, help="calibration documents per criterion")
    parser.add_argument("--oracle-examples", type=int, default=32, help="calibration documents for the oracle")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--json", default="criteria.json", help="file name of the results under --out")
    parser.add_argument("--criteria", type=comma_list, default=None,
                        help="criteria to run, comma-separated (semicolon-separated when any has options); empty: none")
    parser.add_argument("--normalize", type=comma_list, default=["l2"], help="per-layer normalizations to compare")
    parser.add_argument("--compensation", type=comma_list, default=["off"], help="off, on, or off,on")
    parser.add_argument("--test-limit", type=int, default=None, help="evaluate on the first N test documents only")
    parser.add_argument("--random", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--oracle", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--torch-pruning", action="store_true", help="add Torch-Pruning's rows (reference)")
    args = parser.parse_args()
    torch.manual_seed(0)
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    total_heads = 72
    dense_embeddings = dense_test_embeddings(teacher, task, args.test_limit)
    dense_accuracy, _ = evaluate(teacher, task, dense_embeddings, args.test_limit)
    rows = [{"method": "dense", "ratio": 0.0, "accuracy": dense_accuracy, "cosine": 1.0, "seconds": 0.0}]
    print(f"torch threads: {torch.get_num_threads()}; dense test accuracy {dense_accuracy:.4f}", file=sys.stderr)

    means, means_seconds = None, 0.0
    runs = []  # (criterion, its options, normalizations, compensations)
    for spec in CRITERIA.names() if args.criteria is None else args.criteria:
        name, options = criterion_spec(spec)
        normalizations = str(options.pop("normalize", "|".join(args.normalize))).split("|")
        compensations = str(options.pop("compensation", "|".join(args.compensation))).split("|")
        runs.append((name, options, normalizations, compensations))
    if any("on" in compensations for *_, compensations in runs) or (args.random and "on" in args.compensation):
        started = time.perf_counter()
        means = measure_head_means(teacher, task.batches("calibration", 16, limit=args.examples))
        means_seconds = time.perf_counter() - started
        print(f"head means for compensation: {means_seconds:.1f} s", file=sys.stderr)

    def pruned(plan, compensation):
        return apply_plan(copy.deepcopy(teacher), plan, compensation=means if compensation == "on" else None)

    def label(name, normalize, compensation):
        return " ".join([name, f"norm={normalize}"] + (["+comp"] if compensation == "on" else []))

    def one_shot(name, scores, seconds, normalizations, compensations):
        for normalize in normalizations:
            for compensation in compensations:
                method = label(name, normalize, compensation)
                total_seconds = seconds + (means_seconds if compensation == "on" else 0.0)
                for ratio in RATIOS:
                    plan = plan_global_topk(scores.normalize_per_layer(normalize), round(ratio * total_heads))
                    accuracy, cosine = evaluate(pruned(plan, compensation), task, dense_embeddings, args.test_limit)
                    rows.append({"method": method, "ratio": ratio, "accuracy": accuracy, "cosine": cosine,
                                 "seconds": total_seconds})
                    print(f"{method:>36} {ratio:.2f}: acc {accuracy:.4f} cos {cosine:.4f} ({total_seconds:.1f} s)",
                          file=sys.stderr)

    for name, options, normalizations, compensations in runs:
        examples = args.oracle_examples if name == "leave-one-out" else args.examples
        started = time.perf_counter()
        scores = score_heads(teacher, task.batches("calibration", 16, limit=examples), name, **options)
        shown = name + "".join(f" {k}={v}" for k, v in options.items())
        one_shot(shown, scores, time.perf_counter() - started, normalizations, compensations)

    for compensation in args.compensation if args.random else []:
        for ratio in RATIOS:
            results = []
            for seed in range(args.seeds):
                random_scores = HeadScores(np.random.default_rng(seed).random((6, 12)), "random", 0)
                plan = plan_global_topk(random_scores, round(ratio * total_heads))
                results.append(evaluate(pruned(plan, compensation), task, dense_embeddings, args.test_limit))
            accuracy, cosine = np.mean(results, axis=0)
            method = f"random (mean of {args.seeds})" + (" +comp" if compensation == "on" else "")
            rows.append({"method": method, "ratio": ratio, "accuracy": float(accuracy), "cosine": float(cosine),
                         "seconds": 0.0})
            print(f"{method:>36} {ratio:.2f}: acc {accuracy:.4f} cos {cosine:.4f}", file=sys.stderr)

    for importance in IMPORTANCES if args.torch_pruning else ():
        example = next(iter(task.batches("calibration", 2)))
        for ratio in RATIOS:
            started = time.perf_counter()
            model, removed = torch_pruning_heads(
                teacher, ratio, importance, {"input_ids": example["input_ids"],
                                             "attention_mask": example["attention_mask"]},
                task.batches("calibration", 16, limit=args.examples), task.loss)
            seconds = time.perf_counter() - started
            if removed != round(ratio * total_heads):
                raise SystemExit(f"Torch-Pruning removed {removed} heads, not {round(ratio * total_heads)}")
            accuracy, cosine = evaluate(model, task, dense_embeddings, args.test_limit)
            method = f"torch-pruning {importance} (reference)"
            rows.append({"method": method, "ratio": ratio, "accuracy": accuracy, "cosine": cosine,
                         "seconds": seconds})
            print(f"{method:>36} {ratio:.2f}: acc {accuracy:.4f} cos {cosine:.4f} ({seconds:.1f} s)",
                  file=sys.stderr)

    # one greedy run to 75 %, one head per layer per step, measured as it passes 25 % and 50 %
    model = copy.deepcopy(teacher)
    started = time.perf_counter()
    targets = {round(r * total_heads): r for r in RATIOS}

    def checkpoint(pruned, step):
        removed = (step + 1) * 6
        if removed in targets:
            accuracy, cosine = evaluate(pruned, task, dense_embeddings, args.test_limit)
            seconds = time.perf_counter() - started
            rows.append({"method": "greedy leave-one-out (oracle)", "ratio": targets[removed], "accuracy": accuracy,
                         "cosine": cosine, "seconds": seconds})
            print(f"oracle {targets[removed]:.2f}: acc {accuracy:.4f} cos {cosine:.4f} ({seconds:.0f} s)",
                  file=sys.stderr)

    most = max(targets)
    if args.oracle:
        iterative_prune(model, lambda: task.batches("calibration", 16, limit=args.oracle_examples), most,
                        steps=most // 6, criterion="leave-one-out", between_steps=checkpoint)

    print(f"{'method':<40} {'removed':>8} {'test acc %':>10} {'cosine':>8} {'time s':>8}")
    for row in rows:
        print(f"{row['method']:<40} {row['ratio'] * 100:>7.0f}% {row['accuracy'] * 100:>10.2f} "
              f"{row['cosine']:>8.4f} {row['seconds']:>8.1f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / args.json
    path.write_text(json.dumps({"torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                                "examples": args.examples, "oracle_examples": args.oracle_examples,
                                "arguments": sys.argv[1:], "test_limit": args.test_limit,
                                "means_seconds": means_seconds,
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
