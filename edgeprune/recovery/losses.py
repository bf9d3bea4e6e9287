"""Distillation losses: task loss, temperature-scaled KL on logits, embedding and hidden-state alignment.

Hinton, Vinyals and Dean, "Distilling the Knowledge in a Neural Network" (2015): soften both
distributions with temperature T and multiply the KL by T², so its gradients keep the same scale as
the hard-label loss when T changes. Hidden-state alignment with a layer map follows TinyBERT
(Jiao et al., 2020) and DistilBERT's cosine embedding loss (Sanh et al., 2019).
"""

import inspect
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from edgeprune.importance.base import Batch
from edgeprune.models import adapter_for
from edgeprune.models.base import hooks_removed_after
from edgeprune.recovery.config import DistillConfig


@dataclass
class Outputs:
    logits: torch.Tensor  # [batch, classes] or [batch, tokens, vocabulary] (causal LM)
    embedding: torch.Tensor | None  # pooled embedding when the model returns one (EncoderClassifier)
    hidden: list[torch.Tensor]  # per layer output hidden states, when captured


def mask_of(batch: Batch) -> torch.Tensor:
    mask = batch.get("attention_mask")
    return torch.ones_like(batch["input_ids"]) if mask is None else mask


def _takes_attention_mask(model: nn.Module) -> bool:
    parameters = inspect.signature(model.forward).parameters
    return "attention_mask" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def forward(model: nn.Module, batch: Batch) -> Outputs:
    """Run `model` on a batch: EncoderClassifier (logits, embedding), a wrapper returning (logits,), or any output
    with `.logits`. Models whose forward takes no attention mask (fixed full blocks, e.g. CausalLMLogits) get
    the input ids alone."""
    if _takes_attention_mask(model):
        output = model(input_ids=batch["input_ids"], attention_mask=mask_of(batch))
    else:
        output = model(input_ids=batch["input_ids"])
    if isinstance(output, tuple):
        return Outputs(output[0], output[1] if len(output) > 1 else None, [])
    if isinstance(output, torch.Tensor):
        return Outputs(output, None, [])
    return Outputs(output.logits, None, [])


@contextmanager
def captured_hidden(model: nn.Module, store: list[torch.Tensor]) -> Iterator[None]:
    """Context in which every forward fills `store` with each layer's output hidden states, in layer order."""
    layers = adapter_for(model).layer_modules(model)
    slots: dict[int, torch.Tensor] = {}

    def keep(index: int) -> Any:
        def hook(_module: nn.Module, _args: tuple, output: Any) -> None:
            slots[index] = output if isinstance(output, torch.Tensor) else output[0]
            if len(slots) == len(layers):
                store[:] = [slots[i] for i in range(len(layers))]
                slots.clear()
        return hook

    with hooks_removed_after([layer.register_forward_hook(keep(i)) for i, layer in enumerate(layers)]):
        yield


def is_causal_lm(logits: torch.Tensor) -> bool:
    return logits.dim() == 3


def kl_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """T² · KL(softmax(teacher / T) ‖ softmax(student / T)), averaged over examples (or real tokens)."""
    t = temperature
    per_item = F.kl_div(F.log_softmax(student_logits / t, dim=-1), F.log_softmax(teacher_logits / t, dim=-1),
                        log_target=True, reduction="none").sum(-1)
    if mask is None:
        return per_item.mean() * t * t
    weights = mask.to(per_item.dtype)
    return (per_item * weights).sum() / weights.sum().clamp(min=1) * t * t


def next_token_loss(logits: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of predicting token t+1 from position t, over pairs of real tokens."""
    targets = input_ids[:, 1:]
    valid = (mask[:, 1:] * mask[:, :-1]).bool()
    losses = F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), reduction="none")
    return (losses * valid.flatten()).sum() / valid.sum().clamp(min=1)


def task_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """The loss that scores heads for either kind of model: next-token loss of a causal LM (3-d logits),
    else cross-entropy on the batch's labels."""
    logits = forward(model, batch).logits
    if is_causal_lm(logits):
        return next_token_loss(logits, batch["input_ids"], mask_of(batch))
    if "labels" not in batch:
        raise ValueError("the batches have no labels, and the model is not a causal LM; give labelled batches "
                         "or a label-free criterion")
    return F.cross_entropy(logits, batch["labels"])


def embedding_alignment(student: torch.Tensor, teacher: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "cosine":
        return (1 - F.cosine_similarity(student, teacher, dim=-1)).mean()
    return F.mse_loss(student, teacher)


def hidden_alignment(student: Sequence[torch.Tensor], teacher: Sequence[torch.Tensor], layer_map: Sequence[int],
                     mask: torch.Tensor) -> torch.Tensor:
    """Mean over mapped layers of the per-token MSE between student layer i and teacher layer layer_map[i]."""
    weights = mask.to(student[0].dtype)
    total = student[0].new_zeros(())
    for i, j in enumerate(layer_map):
        per_token = (student[i] - teacher[j]).pow(2).mean(-1)
        total = total + (per_token * weights).sum() / weights.sum().clamp(min=1)
    return total / len(layer_map)


def distillation_loss(student: Outputs, teacher: Outputs, batch: Batch, config: DistillConfig,
                      layer_map: Sequence[int] | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted loss of `config` and its parts (as floats, for logging)."""
    mask = mask_of(batch)
    parts: dict[str, torch.Tensor] = {}
    causal = is_causal_lm(student.logits)
    if config.task_weight > 0:
        if causal:
            parts["task"] = next_token_loss(student.logits, batch["input_ids"], mask)
        elif "labels" in batch:
            parts["task"] = F.cross_entropy(student.logits, batch["labels"])
    if config.kd_weight > 0:
        parts["kd"] = kl_divergence(student.logits, teacher.logits, config.temperature, mask if causal else None)
    if config.embedding_weight > 0 and student.embedding is not None and teacher.embedding is not None:
        parts["embedding"] = embedding_alignment(student.embedding, teacher.embedding, config.embedding_loss)
    if config.hidden_weight > 0 and layer_map is not None:
        parts["hidden"] = hidden_alignment(student.hidden, teacher.hidden, layer_map, mask)
    weights = {"task": config.task_weight, "kd": config.kd_weight, "embedding": config.embedding_weight,
               "hidden": config.hidden_weight}
    if not parts:
        raise ValueError("no loss term applies to this batch: give labels or a positive kd/embedding/hidden weight")
    total = sum(weights[name] * value for name, value in parts.items())
    return total, {name: float(value.detach()) for name, value in parts.items()}
