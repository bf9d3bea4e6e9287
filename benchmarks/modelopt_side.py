"""The ModelOpt side of benchmarks/modelopt_reference.py; runs in ModelOpt's own virtual environment.

    python modelopt_side.py DATA_DIR OUT_JSON --targets N1,N2,N3 [--threads 2] [--heads-only]

DATA_DIR (written by modelopt_reference.py from the main venv) holds `encoder/` (the bundled MiniLM, saved with
save_pretrained), and `data.pt`: the fixed classifier's weights, the calibration batches, the test inputs and
labels and the dense model's test embeddings. For every target N (parameters removed from the dense
encoder + classifier), the dense model is pruned one-shot with ModelOpt's `mtp.prune(mode="gradnas",
constraints={"params": dense - N})` (gradient scores of the same loss edgeprune scores with: cross-entropy of
the fixed classifier's logits on the calibration labels; heads and FFN units of every layer), with no
fine-tuning, and evaluated on the test split. Writes the rows as JSON.
"""

import argparse
import copy
import json
import sys
import time
from importlib.metadata import version

import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    """The bundled model as edgeprune runs it: BERT, mean pooling, the fixed linear classifier."""

    def __init__(self, encoder: nn.Module, classifier: nn.Linear) -> None:
        super().__init__()
        self.encoder = encoder
        self.classifier = classifier

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embed(input_ids, attention_mask))


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def evaluate(model: Classifier, data: dict) -> tuple[float, float]:
    model.eval()
    correct, cosines = 0, []
    ids, mask, labels, dense = data["test_input_ids"], data["test_attention_mask"], data["test_labels"], data["dense"]
    for start in range(0, len(ids), 32):
        embedding = model.embed(ids[start:start + 32], mask[start:start + 32])
        correct += int((model.classifier(embedding).argmax(-1) == labels[start:start + 32]).sum())
        cosines.append(F.cosine_similarity(embedding, dense[start:start + 32], dim=-1))
    return correct / len(ids), float(torch.cat(cosines).mean())


def shapes(model: Classifier) -> dict:
    layers = model.encoder.encoder.layer
    return {"heads": [layer.attention.self.num_attention_heads for layer in layers],
            "ffn": [layer.intermediate.dense.out_features for layer in layers],
            "hidden": model.encoder.config.hidden_size}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data")
    parser.add_argument("out")
    parser.add_argument("--targets", required=True, help="parameters to remove, comma-separated")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import modelopt.torch.prune as mtp
    from transformers import BertModel

    data = torch.load(f"{args.data}/data.pt")
    encoder = BertModel.from_pretrained(f"{args.data}/encoder", add_pooling_layer=False, attn_implementation="eager")
    classifier = nn.Linear(*data["classifier.weight"].T.shape)
    classifier.load_state_dict({"weight": data["classifier.weight"], "bias": data["classifier.bias"]})
    dense = Classifier(encoder, classifier).eval()
    dense_params = parameters(dense)
    accuracy, cosine = evaluate(dense, data)
    rows = [{"method": "dense (ModelOpt venv)", "removed": 0, "params": dense_params, "accuracy": accuracy,
             "cosine": cosine, "seconds": 0.0, **shapes(dense)}]
    print(f"modelopt side: torch threads {torch.get_num_threads()}, modelopt {version('nvidia-modelopt')}, "
          f"transformers {version('transformers')}, torch {torch.__version__}; dense accuracy {accuracy:.4f} "
          f"cosine {cosine:.4f}, {dense_params} parameters", file=sys.stderr)
    calibration = data["calibration"]
    errors = []
    # heads only: FFN inputs (intermediate.dense) are left out of the search space, so FFN widths stay
    methods = {"modelopt gradnas heads+ffn": "gradnas",
               "modelopt gradnas heads only": [("gradnas", {"nn.Linear": {"*intermediate.dense": None}})]}
    for method, mode in methods.items():
        for target in (int(t) for t in args.targets.split(",")):
            model = copy.deepcopy(dense)
            started = time.perf_counter()
            example = calibration[0]
            try:
                model, _ = mtp.prune(
                    model, mode=mode, constraints={"params": dense_params - target},
                    dummy_input=(example["input_ids"][:2], example["attention_mask"][:2]),
                    config={"data_loader": calibration, "max_iter_data_loader": len(calibration),
                            "collect_func": lambda batch: (batch["input_ids"], batch["attention_mask"]),
                            "loss_func": lambda output, batch: F.cross_entropy(output, batch["labels"]),
                            "checkpoint": None, "verbose": False})
            except Exception as error:  # noqa: BLE001 - a reference row that fails is reported, the others still run
                errors.append(f"{method}, {target} removed: {type(error).__name__}: {error}")
                print(f"{method}: {errors[-1]}", file=sys.stderr)
                continue
            seconds = time.perf_counter() - started
            accuracy, cosine = evaluate(model, data)
            params = parameters(model)
            rows.append({"method": method, "target_removed": target,
                         "removed": dense_params - params, "params": params, "accuracy": accuracy, "cosine": cosine,
                         "seconds": seconds, **shapes(model)})
            print(f"{method}: removed {dense_params - params} (target {target}): acc {accuracy:.4f} "
                  f"cos {cosine:.4f} ({seconds:.0f} s) {shapes(model)}", file=sys.stderr)
    with open(args.out, "w") as handle:
        json.dump({"torch_threads": torch.get_num_threads(), "modelopt": version("nvidia-modelopt"),
                   "transformers": version("transformers"), "torch": torch.__version__, "errors": errors,
                   "rows": rows}, handle,
                  indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
