"""Parameters and FLOPs: predicted from a plan, and measured on the real module."""

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from edgeprune.models import adapter_for
from edgeprune.pruning.plan import PruningPlan


def measure_flops(model: nn.Module, inputs: dict[str, torch.Tensor]) -> int:
    """Matmul FLOPs (2 per multiply-add) of one forward pass, counted by torch's FLOP counter."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs)
    return int(counter.get_total_flops())


def head_flops(model: nn.Module, layer: int, batch: int, tokens: int) -> int:
    """Matmul FLOPs one head of `layer` costs in self-attention over `tokens` tokens.

    Its Q/K/V rows and output columns each cost 2·batch·tokens·(rows·cols); scores QKᵀ and the
    context P·V each cost 2·batch·tokens²·head_size.
    """
    adapter = adapter_for(model)
    block = adapter.attention_blocks(model)[layer]
    if block.num_kv_heads != block.num_heads:
        raise NotImplementedError("per-head FLOPs with grouped-query attention depend on the KV groups removed")
    matrices = sum(w.numel() for w in adapter.head_weights(model, layer, 0) if w.dim() == 2)
    return 2 * batch * tokens * matrices + 2 * 2 * batch * tokens * tokens * block.head_size


def predicted_flops(model: nn.Module, plan: PruningPlan, inputs: dict[str, torch.Tensor]) -> int:
    """FLOPs of `model` after `apply_plan(model, plan)`: measured now, minus what the removed heads cost."""
    adapter = adapter_for(model)
    shapes: list[torch.Size] = []  # what reaches attention: [batch, tokens, ...] (tokens differ from input for ViT)
    handle = adapter.output_projection(model, 0).register_forward_pre_hook(
        lambda _module, args: shapes.append(args[0].shape))
    try:
        total = measure_flops(model, inputs)
    finally:
        handle.remove()
    batch, tokens = shapes[0][0], shapes[0][1]
    for block, kept in zip(adapter.attention_blocks(model), plan.kept_heads, strict=True):
        total -= (block.num_heads - len(kept)) * head_flops(model, block.layer, batch, tokens)
    return total
