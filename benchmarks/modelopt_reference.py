"""NVIDIA ModelOpt's pruning side by side with edgeprune's, one-shot (no fine-tuning), on `minilm-bbc`.

    flock /tmp/edgeprune-heavy.lock .venv/bin/python benchmarks/modelopt_reference.py [--examples 256]
        [--threads 2] [--out benchmarks/results] [--json modelopt_reference.json] [--venv PATH]

ModelOpt runs in its own virtual environment, created once and reused (default
~/.cache/edgeprune/modelopt-venv, or `EDGEPRUNE_CACHE`/modelopt-venv): nvidia-modelopt==0.44.0 (the last
release with its Hugging Face BERT support in the "gradnas" mode), transformers 4.57.6, torchprofile 0.0.4
(0.1.0 has no `torchprofile.profile.handlers`, which ModelOpt's FLOPs count patches), requests and the CPU torch
2.13.0. This script, in the main venv, exports the bundled MiniLM (save_pretrained),
the fixed dense classifier, the calibration batches (the first --examples documents, batches of 16), the test
inputs and labels and the dense test embeddings to a temporary folder, and runs benchmarks/modelopt_side.py
there as a subprocess.

Ratios are 25/50/75 % of the heads' parameters (18, 36, 54 of 72 heads: their Q/K/V rows and biases and
output-projection columns). Both sides count parameters the same way: every parameter of encoder + classifier,
dense minus pruned. edgeprune: heads only, fluctuation (normalize none) with mean compensation, global top-k,
as benchmarks/criteria.py measures it. ModelOpt: `mtp.prune(mode="gradnas", constraints={"params": dense -
removed})`, gradient scores of cross-entropy through the fixed classifier on the same calibration batches; it
removes heads and FFN units per layer from one ranking; and the same with FFN widths fixed (heads
only). edgeprune joint: `plan_joint` ranks heads ("projected" fluctuation) and groups of 32 FFN neurons (their
fluctuation) together by fluctuation per parameter, both with mean compensation, and removes at least the
heads-only plan's parameters (at most one unit more). Metrics: test accuracy of the fixed classifier on the
pruned model's pooled embedding, and mean cosine of that embedding to the dense one (test split, 668 documents).
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from split_quality import dense_test_embeddings, evaluate

from edgeprune import bundled_task, plan_global_topk, score_heads
from edgeprune.importance.fluctuation import Fluctuation
from edgeprune.progress import Progress
from edgeprune.pruning import StructureCompensation, apply_plan, apply_structure, measure_head_means, plan_joint
from edgeprune.pruning.ffn import neuron_statistics

RATIOS = (0.25, 0.5, 0.75)
PACKAGES = ("nvidia-modelopt==0.44.0", "transformers==4.57.6", "torchprofile==0.0.4", "requests", "torch==2.13.0")
HERE = Path(__file__).resolve().parent


def modelopt_venv(path: Path) -> Path:
    """The venv's python, created with PACKAGES the first time."""
    python = path / "bin" / "python"
    marker = path / "edgeprune-packages.txt"
    installed = "\n".join(PACKAGES) + "\nwithout torchvision"  # what the marker records
    if not (python.exists() and marker.exists() and marker.read_text() == installed):
        print(f"creating ModelOpt's virtual environment in {path} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PACKAGES], check=True)
        # torchprofile pulls PyPI's torchvision, built for PyPI's CUDA torch: against the CPU torch its ops fail to
        # register (`operator torchvision::nms does not exist`) when transformers imports it. Neither ModelOpt's
        # gradnas nor torchprofile's counting of this model needs it, and transformers runs without it.
        subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "torchvision"], check=True)
        marker.write_text(installed)
    return python


def parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=256, help="calibration documents for both sides")
    parser.add_argument("--threads", type=int, default=None, help="torch threads on both sides (default: torch's)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--json", default="modelopt_reference.json", help="file name of the results under --out")
    cache = Path(os.environ.get("EDGEPRUNE_CACHE", Path.home() / ".cache" / "edgeprune"))
    parser.add_argument("--venv", type=Path, default=cache / "modelopt-venv")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    python = modelopt_venv(args.venv)
    torch.manual_seed(0)
    task = bundled_task("minilm-bbc", progress=Progress(enabled=False))
    teacher = task.teacher().model
    dense_embeddings = dense_test_embeddings(teacher, task)
    dense_accuracy, _ = evaluate(teacher, task, dense_embeddings)
    dense_params = parameters(teacher)
    layers = teacher.encoder.encoder.layer
    total_heads = sum(layer.attention.self.num_attention_heads for layer in layers)
    print(f"edgeprune side: torch threads {torch.get_num_threads()}, cpus {os.cpu_count()}; dense accuracy "
          f"{dense_accuracy:.4f}, {dense_params} parameters, {total_heads} heads", file=sys.stderr)
    rows = [{"method": "dense", "ratio": 0.0, "removed": 0, "params": dense_params, "accuracy": dense_accuracy,
             "cosine": 1.0, "seconds": 0.0}]

    started = time.perf_counter()
    calibration = list(task.batches("calibration", 16, limit=args.examples))
    scores = score_heads(teacher, iter(calibration), "fluctuation")
    means = measure_head_means(teacher, iter(calibration))
    scoring_seconds = time.perf_counter() - started
    targets = []
    for ratio in RATIOS:
        heads = round(ratio * total_heads)
        model = apply_plan(copy.deepcopy(teacher), plan_global_topk(scores.normalize_per_layer("none"), heads),
                           compensation=means)
        removed = dense_params - parameters(model)
        targets.append(removed)
        accuracy, cosine = evaluate(model, task, dense_embeddings)
        rows.append({"method": "edgeprune fluctuation +comp (heads only)", "ratio": ratio, "removed": removed,
                     "params": dense_params - removed, "accuracy": accuracy, "cosine": cosine,
                     "seconds": scoring_seconds, "heads_removed": heads,
                     "heads": [layer.attention.self.num_attention_heads for layer in model.encoder.encoder.layer]})
        print(f"edgeprune {ratio:.2f}: removed {removed}: acc {accuracy:.4f} cos {cosine:.4f}", file=sys.stderr)

    started = time.perf_counter()
    projected = Fluctuation("projected").score(teacher, iter(calibration))
    neurons = neuron_statistics(teacher, iter(calibration))
    joint_seconds = time.perf_counter() - started + scoring_seconds  # the head means are shared
    for ratio, target in zip(RATIOS, targets, strict=True):
        plan = plan_joint(teacher, projected, neurons, target, neuron_multiple=32)
        model = apply_structure(copy.deepcopy(teacher), plan.structure, StructureCompensation(means, neurons.means))
        removed = dense_params - parameters(model)
        accuracy, cosine = evaluate(model, task, dense_embeddings)
        rows.append({"method": "edgeprune joint heads+FFN +comp", "ratio": ratio, "removed": removed,
                     "params": dense_params - removed, "accuracy": accuracy, "cosine": cosine,
                     "seconds": joint_seconds, "heads_removed": plan.heads_removed,
                     "heads": [len(kept) for kept in plan.structure.heads.kept_heads],
                     "ffn": [len(kept) for kept in plan.structure.ffn_kept]})
        print(f"edgeprune joint {ratio:.2f}: removed {removed}: acc {accuracy:.4f} cos {cosine:.4f}", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="edgeprune-modelopt-") as folder:
        teacher.encoder.save_pretrained(f"{folder}/encoder")
        test = task.encode("test")
        torch.save({"classifier.weight": teacher.classifier.weight.detach().clone(),
                    "classifier.bias": teacher.classifier.bias.detach().clone(),
                    "calibration": [{k: batch[k] for k in ("input_ids", "attention_mask", "labels")}
                                    for batch in calibration],
                    "test_input_ids": test["input_ids"], "test_attention_mask": test["attention_mask"],
                    "test_labels": test["labels"], "dense": dense_embeddings}, f"{folder}/data.pt")
        command = [str(python), str(HERE / "modelopt_side.py"), folder, f"{folder}/modelopt.json",
                   "--targets", ",".join(map(str, targets))]
        if args.threads:
            command += ["--threads", str(args.threads)]
        subprocess.run(command, check=True)
        side = json.loads(Path(f"{folder}/modelopt.json").read_text())
    ratio_of = dict(zip(targets, RATIOS, strict=True))
    rows += [{**row, "ratio": ratio_of[row["target_removed"]]} for row in side["rows"][1:]]
    rows.insert(1, {**side["rows"][0], "ratio": 0.0})

    for error in side["errors"]:
        print(f"ModelOpt failed: {error}")
    print(f"torch threads: edgeprune side {torch.get_num_threads()}, ModelOpt side {side['torch_threads']}; "
          f"ModelOpt {side['modelopt']}, transformers {side['transformers']} there")
    print(f"{'method':<42} {'ratio':>6} {'params':>9} {'removed':>8} {'test acc %':>10} {'cosine':>8} {'time s':>7}")
    for row in sorted(rows, key=lambda r: (r["ratio"], r["method"])):
        print(f"{row['method']:<42} {row['ratio'] * 100:>5.0f}% {row['params']:>9} {row['removed']:>8} "
              f"{row['accuracy'] * 100:>10.2f} {row['cosine']:>8.4f} {row['seconds']:>7.1f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / args.json
    path.write_text(json.dumps({"torch_threads": torch.get_num_threads(), "modelopt_torch_threads":
                                side["torch_threads"], "cpus": os.cpu_count(), "examples": args.examples,
                                "versions": {k: side[k] for k in ("modelopt", "transformers", "torch")},
                                "arguments": sys.argv[1:], "modelopt_errors": side["errors"],
                                "rows": rows}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
