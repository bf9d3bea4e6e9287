"""Which part of a 4-bit recipe costs a recovered structure its accuracy: the linears, or the embedding tables, and
with what grouping of the tables' scales (issue 16: int4 took 2-3 points from recovered structures of 5 MB fits).

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/int4_parts.py [--shape 12,0.5,2] [--steps 150]
        [--out benchmarks/results]

The structure is the one fit builds for the shape (`recovery_settings.fit_structure`), recovered with fit's
settings; then, each in PyTorch on the validation and test splits: the float model; its embedding tables (word,
position, token type) rounded to 8 bits per row, to 4 bits per row, to 4 bits per row for the word table alone
(the others 8 bits), to 4 bits per group of 32 or 64 columns; and the recipes `int4-linear` (4-bit linears, int8
tables), `int8-emb4` and `int4` as edgeprune quantizes them (the tables as `Int4Embedding` stores them now).
Tables are rounded symmetrically (levels -8..7 or -128..127, step = largest magnitude / 7 or / 127), as the
table modules store them. Prints a table; writes int4_parts.json.
"""

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
from recovery_qat import fit_recovery_config
from recovery_settings import fit_structure
from torch import nn

from edgeprune import bundled_task
from edgeprune.progress import Progress
from edgeprune.quantize import quantize
from edgeprune.recovery import DistillData, distill
from edgeprune.search.space import Shape
from edgeprune.tasks.base import batched_quality


def rounded(weight: torch.Tensor, group: int, bits: int) -> torch.Tensor:
    """`weight` rounded symmetrically to `bits` with one scale per `group` columns of a row."""
    rows, width = weight.shape
    grouped = weight.reshape(rows, width // group, group)
    top = 2 ** (bits - 1) - 1
    scale = grouped.abs().amax(-1, keepdim=True).clamp(min=1e-12) / top
    return (torch.round(grouped / scale).clamp(-top - 1, top) * scale).reshape(rows, width)


def tables_rounded(model: nn.Module, word: tuple[int, int | None], others: tuple[int, int | None]) -> nn.Module:
    """A copy whose word table is rounded as `word` (bits, group; None: per row) and other tables as `others`."""
    copied = copy.deepcopy(model)
    for module in copied.modules():
        if isinstance(module, nn.Embedding):
            bits, group = word if module.num_embeddings > 1000 else others
            with torch.no_grad():
                module.weight.copy_(rounded(module.weight, group or module.embedding_dim, bits))
    return copied


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="12,0.5,2", help="heads removed, FFN fraction, layers removed")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    heads, ffn, layers = args.shape.split(",")
    shape = Shape(int(heads), float(ffn), int(layers))
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher()
    with tempfile.TemporaryDirectory(prefix="edgeprune-int4-parts-") as scratch:
        student = fit_structure(task, teacher, shape, Path(scratch))
    distill(student, teacher.model, DistillData.from_task(task, 16, task.seed), fit_recovery_config(task, args.steps),
            Progress(interval_s=60))
    student.eval()
    variants = {
        "float": lambda: student,
        "tables 8-bit per row": lambda: tables_rounded(student, (8, None), (8, None)),
        "tables 4-bit per row": lambda: tables_rounded(student, (4, None), (4, None)),
        "word table 4-bit per row, others 8-bit": lambda: tables_rounded(student, (4, None), (8, None)),
        "tables 4-bit, groups of 32": lambda: tables_rounded(student, (4, 32), (4, 32)),
        "tables 4-bit, groups of 64": lambda: tables_rounded(student, (4, 64), (4, 64)),
        "recipe int4-linear": lambda: quantize(student, "int4-linear"),
        "recipe int8-emb4": lambda: quantize(student, "int8-emb4"),
        "recipe int4": lambda: quantize(student, "int4"),
    }
    rows = []
    for name, make in variants.items():
        started = time.perf_counter()
        model = make()
        row = {"variant": name, "validation": batched_quality(task, model, "validation").value,
               "test": batched_quality(task, model, "test").value, "seconds": round(time.perf_counter() - started, 1)}
        rows.append(row)
        print(row, file=sys.stderr)
    print(f"{shape.describe()}, recovered {args.steps} steps; dense test {teacher.test.value:.2%}; PyTorch, torch "
          f"threads {torch.get_num_threads()}")
    print(f"{'variant':<42} {'val %':>7} {'test %':>7}")
    for row in rows:
        print(f"{row['variant']:<42} {row['validation']:>7.2%} {row['test']:>7.2%}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "int4_parts.json"
    path.write_text(json.dumps({"shape": shape.key, "steps": args.steps, "dense_test_pytorch": teacher.test.value,
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
