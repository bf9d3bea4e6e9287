"""How fit spreads an FFN cut over the layers: the same fraction of every layer (uniform) against groups of 32
neurons allocated across layers by their fluctuation (scored, `plan_neurons(..., per_layer=False)`), one-shot on
`minilm-bbc`.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/ffn_allocation.py [--examples 256]
        [--fractions 0.25,0.5,0.75] [--heads 0,36] [--threads 2] [--out benchmarks/results]

Both allocations remove the same number of neurons (widths on multiples of 32, each layer keeping at least four
groups), with each removed neuron's mean output folded into the bias (compensation), optionally beside a global
top-k head cut (fluctuation, raw scores, compensated) of `--heads` heads. No fine-tuning. Metrics on the test
split (668 documents): accuracy of the dense model's fixed classifier on the pruned embedding and the mean cosine
of that embedding to the dense one. Prints a table and writes JSON.
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

from edgeprune import bundled_task, plan_global_topk, score_heads
from edgeprune.progress import Progress
from edgeprune.pruning import StructureCompensation, StructurePlan, apply_structure, measure_head_means
from edgeprune.pruning.ffn import neuron_statistics, plan_neurons
from edgeprune.pruning.structure import ffn_kept_from_removal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=256, help="calibration documents")
    parser.add_argument("--fractions", default="0.25,0.5,0.75", help="FFN fractions removed")
    parser.add_argument("--heads", default="0,36", help="heads removed beside the FFN cut (of 72)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    dense_embeddings = dense_test_embeddings(teacher, task)
    dense_accuracy, _ = evaluate(teacher, task, dense_embeddings)
    print(f"torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}; dense accuracy {dense_accuracy:.4f}",
          file=sys.stderr)
    started = time.perf_counter()
    calibration = list(task.batches("calibration", 16, limit=args.examples))
    neurons = neuron_statistics(teacher, iter(calibration))
    head_scores = score_heads(teacher, iter(calibration), "fluctuation").normalize_per_layer("none")
    means = measure_head_means(teacher, iter(calibration))
    print(f"scored in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    widths = [len(values) for values in neurons.fluctuation]
    rows = [{"allocation": "dense", "fraction": 0.0, "heads_removed": 0, "accuracy": dense_accuracy, "cosine": 1.0,
             "widths": widths}]
    for heads in (int(h) for h in args.heads.split(",")):
        plan = plan_global_topk(head_scores, heads)
        for fraction in (float(f) for f in args.fractions.split(",")):
            for allocation, removal in (
                    ("uniform", plan_neurons(neurons.fluctuation, fraction, multiple=32)),
                    ("scored", plan_neurons(neurons.fluctuation, fraction, per_layer=False, multiple=32))):
                kept = ffn_kept_from_removal(widths, removal)
                structure = StructurePlan(plan, kept)
                model = apply_structure(copy.deepcopy(teacher), structure, StructureCompensation(means, neurons.means))
                accuracy, cosine = evaluate(model, task, dense_embeddings)
                rows.append({"allocation": allocation, "fraction": fraction, "heads_removed": heads,
                             "neurons_removed": sum(map(len, removal.values())), "accuracy": accuracy,
                             "cosine": cosine, "widths": [len(k) for k in kept]})
                print(f"{allocation:>8} FFN -{fraction:.0%} heads -{heads}: acc {accuracy:.4f} cos {cosine:.4f} "
                      f"widths {[len(k) for k in kept]}", file=sys.stderr)
    print(f"{'allocation':<10} {'heads':>5} {'FFN':>5} {'neurons':>8} {'test acc %':>10} {'cosine':>8}  widths")
    for row in rows:
        print(f"{row['allocation']:<10} {row['heads_removed']:>5} {row['fraction']:>5.2f} "
              f"{row.get('neurons_removed', 0):>8} {row['accuracy'] * 100:>10.2f} {row['cosine']:>8.4f}  "
              f"{','.join(str(w) for w in row['widths'])}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ffn_allocation.json").write_text(json.dumps({"threads": torch.get_num_threads(), "rows": rows},
                                                             indent=2) + "\n")
    print(f"wrote {args.out / 'ffn_allocation.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
