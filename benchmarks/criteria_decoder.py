"""Head criteria on a decoder (SmolLM2-135M): held-out perplexity after one-shot removal, per criterion,
per-layer normalization and bias compensation, side by side in one run; and where each criterion removes heads.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/criteria_decoder.py [--ratio 0.22]
    .venv/bin/python benchmarks/criteria_decoder.py --quick    # tiny settings: proves the script runs

BBC News documents are split by document (seed 0) into calibration (scoring, head means) and held-out
(perplexity only) text, tokenized with SmolLM2's tokenizer and cut into blocks. Every row removes the number of
query heads closest to `--ratio` of 270 in valid grouped-query steps (global top-k, whole KV groups or the same
number of heads from every group). Prints a table and the per-layer removal counts; writes criteria_decoder.json.
"""

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch
from recovery_decoder import smollm2_gguf

from edgeprune.data.bbc import load_bbc_news
from edgeprune.importance import score_heads
from edgeprune.pruning import Constraints, apply_plan, measure_head_means
from edgeprune.recovery.losses import task_loss
from edgeprune.recovery.schedules import plan_closest
from edgeprune.recovery.text import TextCorpus, perplexity

ROWS = (  # criterion (fluctuation-FORM: fluctuation with that form), per-layer normalization, compensation
    ("taylor", "l2", False), ("taylor", "l2", True), ("taylor", "none", True), ("taylor", "zscore", True),
    ("fluctuation-projected", "none", False), ("fluctuation-projected", "none", True),
    ("fluctuation-projected", "l2", True), ("fluctuation-projected", "zscore", True),
    ("fluctuation-relative", "none", True), ("fluctuation-relative", "zscore", True),
)
FORMS = {"fluctuation-projected": ("fluctuation", {"form": "projected"}),
         "fluctuation-relative": ("fluctuation", {"form": "relative"})}  # the default form


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ratio", type=float, default=0.22, help="share of the 270 query heads to remove")
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--scoring-blocks", type=int, default=64, help="calibration blocks (scores and means)")
    parser.add_argument("--held-out-blocks", type=int, default=32)
    parser.add_argument("--rows", default="", help="comma-separated row numbers to run (default: all)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    if args.quick:
        args.block_size, args.scoring_blocks, args.held_out_blocks = 32, 4, 4
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    teacher = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    corpus = TextCorpus.from_texts([d.text for d in load_bbc_news()],
                                   lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
                                   args.block_size, seed=0, separator=tokenizer.eos_token_id)
    held = corpus.blocks["held_out"]
    held_ids = held[torch.linspace(0, len(held) - 1, min(args.held_out_blocks, len(held))).long()]

    def held_out():
        for start in range(0, len(held_ids), args.batch_size):
            ids = held_ids[start:start + args.batch_size]
            yield {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def calibration():
        return list(corpus.batches("calibration", args.batch_size, args.scoring_blocks))

    print(f"torch threads {torch.get_num_threads()}; {len(held_ids)} held-out and {args.scoring_blocks} "
          f"calibration blocks of {args.block_size} tokens", file=sys.stderr)
    started = time.perf_counter()
    dense = perplexity(teacher, held_out())
    print(f"dense: {dense:.3f} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    means = measure_head_means(teacher, calibration())
    constraints = Constraints.for_model(teacher)
    total = sum(len(heads) for heads in plan_heads_dense(teacher))
    target = round(args.ratio * total)
    chosen = [int(i) for i in args.rows.split(",")] if args.rows else range(len(ROWS))
    raw: dict[str, object] = {}
    rows = []
    for index in chosen:
        criterion, normalize, compensate = ROWS[index]
        if criterion not in raw:
            began = time.perf_counter()
            name, options = FORMS.get(criterion, (criterion, {}))
            raw[criterion] = score_heads(teacher, calibration(), name, loss_fn=task_loss, **options)
            print(f"scored {criterion} in {time.perf_counter() - began:.0f} s", file=sys.stderr)
        plan = plan_closest(raw[criterion].normalize_per_layer(normalize), target, constraints)
        model = apply_plan(copy.deepcopy(teacher), plan, compensation=means if compensate else None)
        began = time.perf_counter()
        value = perplexity(model, held_out())
        removed_per_layer = [len(h) - len(k) for h, k in zip(plan_heads_dense(teacher), plan.kept_heads, strict=True)]
        rows.append({"criterion": criterion, "normalize": normalize, "compensate": compensate,
                     "heads_removed": total - plan.heads_kept, "perplexity": value, "ratio_to_dense": value / dense,
                     "removed_per_layer": removed_per_layer})
        print(f"{criterion:<22} {normalize:<7} {'comp' if compensate else '-':<5} "
              f"removed {rows[-1]['heads_removed']:>3}  ppl {value:9.3f}  ×{value / dense:6.2f}  "
              f"({time.perf_counter() - began:.0f} s)  per layer "
              f"{removed_per_layer}", file=sys.stderr)
        del model
    print(f"\n{'criterion':<22} {'norm':<7} {'comp':<5} {'removed':>7} {'perplexity':>10} {'× dense':>8}")
    for row in rows:
        print(f"{row['criterion']:<22} {row['normalize']:<7} {'yes' if row['compensate'] else 'no':<5} "
              f"{row['heads_removed']:>7} {row['perplexity']:>10.3f} {row['ratio_to_dense']:>8.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("criteria_decoder-quick.json" if args.quick else "criteria_decoder.json")
    path.write_text(json.dumps({
        "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to fp32)", "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(), "ratio": args.ratio, "target_heads_removed": target, "total_heads": total,
        "block_size": args.block_size, "scoring_blocks": args.scoring_blocks, "held_out_blocks": len(held_ids),
        "dense_perplexity": dense, "rows": rows, "quick": args.quick,
    }, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


def plan_heads_dense(model: torch.nn.Module) -> list[list[int]]:
    from edgeprune.models import adapter_for

    return [list(block.original_heads) for block in adapter_for(model).attention_blocks(model)]


if __name__ == "__main__":
    sys.exit(main())
