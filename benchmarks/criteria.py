"""Head-importance criteria on `minilm-bbc`, one-shot (no recovery): quality after removing 25/50/75 % of heads.

    .venv/bin/python benchmarks/criteria.py [--examples 256] [--oracle-examples 64] [--out benchmarks/results]

For every registered criterion, random selection (mean of 5 seeds) and greedy leave-one-out (the
oracle: re-scored after every step of one head per layer), prints test accuracy, mean embedding
cosine to the dense model, and the criterion's wall time. Scores are normalized per layer and heads
are chosen globally, at least one per layer. Scoring uses calibration data; quality is the test split.
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

from edgeprune import HeadScores, bundled_task, plan_global_topk, score_heads
from edgeprune.importance import CRITERIA
from edgeprune.progress import Progress
from edgeprune.pruning import apply_plan, iterative_prune

RATIOS = (0.25, 0.5, 0.75)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=256, help="calibration documents per criterion")
    parser.add_argument("--oracle-examples", type=int, default=32, help="calibration documents for the oracle")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    torch.manual_seed(0)
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    total_heads = 72
    dense_embeddings = dense_test_embeddings(teacher, task)
    dense_accuracy, _ = evaluate(teacher, task, dense_embeddings)
    rows = [{"method": "dense", "ratio": 0.0, "accuracy": dense_accuracy, "cosine": 1.0, "seconds": 0.0}]
    print(f"torch threads: {torch.get_num_threads()}; dense test accuracy {dense_accuracy:.4f}", file=sys.stderr)

    def one_shot(name, scores, seconds):
        for ratio in RATIOS:
            plan = plan_global_topk(scores.normalize_per_layer(), round(ratio * total_heads))
            accuracy, cosine = evaluate(apply_plan(copy.deepcopy(teacher), plan), task, dense_embeddings)
            rows.append({"method": name, "ratio": ratio, "accuracy": accuracy, "cosine": cosine, "seconds": seconds})
            print(f"{name:>20} {ratio:.2f}: acc {accuracy:.4f} cos {cosine:.4f} ({seconds:.1f} s)", file=sys.stderr)

    for name in CRITERIA.names():
        examples = args.oracle_examples if name == "leave-one-out" else args.examples
        started = time.perf_counter()
        scores = score_heads(teacher, task.batches("calibration", 16, limit=examples), name)
        one_shot(name, scores, time.perf_counter() - started)

    for ratio in RATIOS:
        results = []
        for seed in range(args.seeds):
            random_scores = HeadScores(np.random.default_rng(seed).random((6, 12)), "random", 0)
            plan = plan_global_topk(random_scores, round(ratio * total_heads))
            results.append(evaluate(apply_plan(copy.deepcopy(teacher), plan), task, dense_embeddings))
        accuracy, cosine = np.mean(results, axis=0)
        rows.append({"method": f"random (mean of {args.seeds})", "ratio": ratio, "accuracy": float(accuracy),
                     "cosine": float(cosine), "seconds": 0.0})

    # one greedy run to 75 %, one head per layer per step, measured as it passes 25 % and 50 %
    model = copy.deepcopy(teacher)
    started = time.perf_counter()
    targets = {round(r * total_heads): r for r in RATIOS}

    def checkpoint(pruned, step):
        removed = (step + 1) * 6
        if removed in targets:
            accuracy, cosine = evaluate(pruned, task, dense_embeddings)
            seconds = time.perf_counter() - started
            rows.append({"method": "greedy leave-one-out (oracle)", "ratio": targets[removed], "accuracy": accuracy,
                         "cosine": cosine, "seconds": seconds})
            print(f"oracle {targets[removed]:.2f}: acc {accuracy:.4f} cos {cosine:.4f} ({seconds:.0f} s)",
                  file=sys.stderr)

    most = max(targets)
    iterative_prune(model, lambda: task.batches("calibration", 16, limit=args.oracle_examples), most,
                    steps=most // 6, criterion="leave-one-out", between_steps=checkpoint)

    print(f"{'method':<32} {'removed':>8} {'test acc %':>10} {'cosine':>8} {'time s':>8}")
    for row in rows:
        print(f"{row['method']:<32} {row['ratio'] * 100:>7.0f}% {row['accuracy'] * 100:>10.2f} "
              f"{row['cosine']:>8.4f} {row['seconds']:>8.1f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "criteria.json"
    path.write_text(json.dumps({"torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(),
                                "examples": args.examples, "oracle_examples": args.oracle_examples,
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
