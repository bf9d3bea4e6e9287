"""Quality metrics the tasks share: classification reports, neighbour agreement, perplexity."""

import math
from typing import Any

import torch
import torch.nn.functional as F


def classification_report(logits: torch.Tensor, targets: torch.Tensor, labels: list[str],
                          top_k: tuple[int, ...] = ()) -> dict[str, Any]:
    """Accuracy, macro-F1, per-class precision/recall/F1/errors and the confusion matrix [true][predicted]."""
    predictions = logits.argmax(-1)
    classes = len(labels)
    confusion = torch.zeros(classes, classes, dtype=torch.long)
    for true, predicted in zip(targets.tolist(), predictions.tolist(), strict=True):
        confusion[true, predicted] += 1
    per_class = {}
    f1_scores = []
    for index, label in enumerate(labels):
        true_positive = int(confusion[index, index])
        support = int(confusion[index].sum())
        predicted = int(confusion[:, index].sum())
        precision = true_positive / predicted if predicted else 0.0
        recall = true_positive / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        if support:
            f1_scores.append(f1)
        per_class[label] = {"support": support, "errors": support - true_positive, "precision": round(precision, 6),
                            "recall": round(recall, 6), "f1": round(f1, 6)}
    report: dict[str, Any] = {
        "accuracy": int((predictions == targets).sum()) / len(targets) if len(targets) else 0.0,
        "macro_f1": sum(f1_scores) / len(f1_scores) if f1_scores else 0.0,
        "per_class": per_class, "confusion_matrix": confusion.tolist(), "labels": labels,
    }
    for k in top_k:
        k = min(k, classes)
        top = logits.topk(k, dim=-1).indices
        report[f"top{k}"] = int((top == targets.unsqueeze(-1)).any(-1).sum()) / len(targets) if len(targets) else 0.0
    return report


def per_class_regressions(reference: dict[str, Any], candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """Classes whose recall dropped against the reference (a pruned model can keep its mean and lose a class)."""
    regressions = []
    for label, ours in candidate.get("per_class", {}).items():
        theirs = reference.get("per_class", {}).get(label)
        if theirs is None or not ours["support"]:
            continue
        drop = theirs["recall"] - ours["recall"]
        if drop > 1e-9:
            regressions.append({"label": label, "reference_recall": theirs["recall"], "recall": ours["recall"],
                                "drop": round(drop, 6), "extra_errors": ours["errors"] - theirs["errors"]})
    return sorted(regressions, key=lambda r: -r["drop"])


def neighbour_agreement(candidate: torch.Tensor, reference: torch.Tensor, k: int = 5) -> float:
    """Mean overlap of each example's k nearest neighbours (cosine, itself excluded) under both embeddings."""
    count = candidate.shape[0]
    k = min(k, count - 1)
    if k < 1:
        return 1.0

    def neighbours(vectors: torch.Tensor) -> torch.Tensor:
        unit = F.normalize(vectors.float(), dim=-1)
        similarity = unit @ unit.T
        similarity.fill_diagonal_(-math.inf)
        return similarity.topk(k, dim=-1).indices

    ours, theirs = neighbours(candidate), neighbours(reference)
    overlap = [len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(ours, theirs, strict=True)]
    return sum(overlap) / len(overlap)


def next_token_nll(logits: torch.Tensor, input_ids: torch.Tensor) -> tuple[float, int]:
    """Summed negative log-likelihood of each next token, and how many tokens were predicted."""
    shifted = logits[..., :-1, :].float().reshape(-1, logits.shape[-1])
    targets = input_ids[..., 1:].reshape(-1)
    return float(F.cross_entropy(shifted, targets, reduction="sum")), int(targets.numel())
