"""Quantization-aware recovery, measured: does distilling a pruned MiniLM with its linears fake-quantized as the
`int4` recipe will quantize them win back what int4 takes from a recovered model? (issue 16; inside fit, int4 cost
a recovered structure up to 3.6 points of validation accuracy: docs/FINDINGS.md)

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/recovery_qat.py [--heads 42] [--ffn 0.5]
        [--steps 150] [--out benchmarks/results]

One structure of `minilm-bbc` (heads removed by fit's scores with their mean outputs folded into the biases, FFN
neurons of lowest fluctuation with theirs), two recoveries from the same pruned weights with fit's settings
(`recover_steps` steps, batches of 16, KL + task loss + embedding alignment):
  plain   distilled in float, as fit does today;
  qat     distilled with every linear the recipe takes to 4 bits replaced by torchao's fake-quantized linear for
          the same scheme (`QATConfig(Int8DynamicActivationIntxWeightConfig(int4, groups of 32))`: int8 dynamic
          per-token activations, symmetric 4-bit weights per group), swapped back to plain linears after.
Each is then exported with the `int4` recipe (4-bit linears and 4-bit per-row embedding tables, not trained
for) and evaluated through ExecuTorch; the table gives validation and test accuracy in PyTorch (float) and
through the runtime, and the recovery time. Prints a table, writes recovery_qat.json.
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
from torch import nn

from edgeprune import bundled_task, export, load_artifact, plan_global_topk
from edgeprune.progress import Progress
from edgeprune.pruning.compensation import measure_head_means
from edgeprune.pruning.ffn import intermediate_sizes, neuron_statistics, plan_neurons
from edgeprune.pruning.structure import StructureCompensation, StructurePlan, apply_structure, ffn_kept_from_removal
from edgeprune.quantize import RECIPES
from edgeprune.quantize.recipes import INT4_GROUP
from edgeprune.recovery import DistillConfig, DistillData, distill
from edgeprune.search.options import FitOptions
from edgeprune.search.recovering import recovery_config
from edgeprune.search.scoring import measured_head_scores, scoring_decision
from edgeprune.tasks.base import batched_quality, input_batches


def fake_quantized(model: nn.Module) -> nn.Module:
    """The linears that the int4 recipe takes to 4 bits, fake-quantized for training as it will quantize them."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.qat import QATConfig

    scheme = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(INT4_GROUP))
    quantize_(model, QATConfig(scheme, step="prepare"),
              filter_fn=lambda m, _: isinstance(m, nn.Linear) and m.in_features % INT4_GROUP == 0)
    return model


def plain_linears(model: nn.Module) -> nn.Module:
    """Every fake-quantized linear back to an nn.Linear with the trained weights (the recipe quantizes them)."""
    from torchao.quantization.qat import FakeQuantizedLinear

    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, FakeQuantizedLinear):
                setattr(parent, name, child.to_linear())
    return model


def pruned_structure(task, teacher, heads: int, ffn: float, examples: int) -> nn.Module:  # noqa: ANN001
    """MiniLM with `heads` of 72 heads removed by fit's scores and `ffn` of its FFN neurons by fluctuation, their
    mean outputs folded into the biases (fit's compensation)."""
    inputs = input_batches(task, "calibration", 16, limit=examples)
    scores = measured_head_scores(task, teacher.model, teacher.validation, examples, compensate=True)
    scores = scores.normalize_per_layer(scoring_decision(scores).choice.normalize)
    statistics = neuron_statistics(teacher.model, inputs)
    ffn_kept = ffn_kept_from_removal(intermediate_sizes(teacher.model), plan_neurons(statistics.fluctuation, ffn))
    structure = StructurePlan(plan_global_topk(scores, heads), ffn_kept)
    return apply_structure(copy.deepcopy(teacher.model), structure,
                           StructureCompensation(measure_head_means(teacher.model, inputs), statistics.means))


def fit_recovery_config(task, steps: int, **changes) -> DistillConfig:  # noqa: ANN001, ANN003
    """Fit's recovery settings (`recovering.recovery_config`) for `steps` steps, with `changes`."""
    return recovery_config(task, FitOptions(recover_steps=steps)).replace(**changes)


def structure_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that name the structure and its recovery (this script's and recovery_speed.py's)."""
    parser.add_argument("--heads", type=int, default=42, help="heads removed of 72")
    parser.add_argument("--ffn", type=float, default=0.5, help="share of FFN neurons removed")
    parser.add_argument("--steps", type=int, default=150, help="distillation steps (fit's --recover-steps)")
    parser.add_argument("--examples", type=int, default=256, help="calibration documents for scores and means")


def through_runtime(model: nn.Module, task, folder: Path, name: str) -> dict:
    recipe = RECIPES.get("int4")
    example = task.example_inputs("validation", 1)[0]
    artifact = export(model, example, folder / f"{name}.pte", recipe,
                      verify_on=task.example_inputs("validation", 8), keep_rejected=True)
    run = load_artifact(artifact.path)
    return {"file_mb": round(artifact.size_bytes / 1e6, 3), "min_cosine": artifact.verification.min_cosine,
            "validation": task.runtime_quality(run, "validation").value,
            "test": task.runtime_quality(run, "test").value}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    structure_arguments(parser)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher()
    pruned = pruned_structure(task, teacher, args.heads, args.ffn, args.examples)
    steps = args.steps
    config = fit_recovery_config(task, steps)
    data = DistillData.from_task(task, 16, task.seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgeprune-qat-") as folder:
        for method in ("plain", "qat"):
            student = copy.deepcopy(pruned)
            if method == "qat":
                fake_quantized(student)
            started = time.perf_counter()
            result = distill(student, teacher.model, data, config.replace(precision="float32"),
                             Progress(interval_s=60))
            seconds = time.perf_counter() - started
            student = plain_linears(student).eval()
            row = {"method": method, "recovery_s": round(seconds, 1), "steps": result.steps,
                   "best_step": result.best_step,
                   "pytorch_validation": batched_quality(task, student, "validation").value,
                   "pytorch_test": batched_quality(task, student, "test").value,
                   **through_runtime(student, task, Path(folder), method)}
            rows.append(row)
            print(row, file=sys.stderr)
    dense_test = teacher.test.value
    header = f"{'recovery':<8} {'s':>6} {'val % fp32':>10} {'val % int4':>10} {'test % fp32':>11} {'test % int4':>11}"
    print(f"{args.heads} of 72 heads removed, FFN -{args.ffn:.0%}, {steps} steps; dense test {dense_test:.2%} "
          f"(PyTorch); torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs")
    print(header)
    for row in rows:
        print(f"{row['method']:<8} {row['recovery_s']:>6.0f} {row['pytorch_validation']:>10.2%} "
              f"{row['validation']:>10.2%} {row['pytorch_test']:>11.2%} {row['test']:>11.2%}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "recovery_qat.json"
    path.write_text(json.dumps({"heads_removed": args.heads, "ffn_removed": args.ffn, "steps": steps,
                                "dense_test_pytorch": dense_test, "torch_threads": torch.get_num_threads(),
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
