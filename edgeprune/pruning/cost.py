"""Parameters and FLOPs: predicted from a plan, and measured on the real module."""

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from edgeprune.errors import UserInputError
from edgeprune.models import AttentionBlock, adapter_for
from edgeprune.models.llama import gqa_removal_is_valid
from edgeprune.pruning.plan import PruningPlan


def measure_flops(model: nn.Module, inputs: dict[str, torch.Tensor]) -> int:
    """Matmul FLOPs (2 per multiply-add) of one forward pass, counted by torch's FLOP counter."""
    return _counted_flops(model, inputs)[0]


def _counted_flops(model: nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[int, dict[str, int]]:
    """Total counted FLOPs of one forward, and the FLOPs counted inside each module (by dotted name)."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(**inputs)
    prefix = type(model).__name__
    by_module = {name: sum(counts.values()) for name, counts in counter.get_flop_counts().items()}
    return int(counter.get_total_flops()), {name: by_module.get(f"{prefix}.{name}" if name else prefix, 0)
                                            for name, _ in model.named_modules()}


def _attention_products_counted(model: nn.Module, layer: nn.Module, by_module: dict[str, int]) -> int:
    """FLOPs the counter saw inside `layer` outside its linears: the attention products QKᵀ and P·V.

    That is 4·batch·tokens²·head size per query head with eager attention, but zero with PyTorch's fused CPU
    attention (`_scaled_dot_product_flash_attention_for_cpu` has no FLOP formula in torch's counter), so what
    removal saves is taken from what the counter counted, not from the formula.
    """
    names = {id(m): n for n, m in model.named_modules()}
    linears = sum(by_module[names[id(m)]] for m in layer.modules() if isinstance(m, nn.Linear))
    return by_module[names[id(layer)]] - linears


def head_flops(model: nn.Module, layer: int, batch: int, tokens: int) -> int:
    """Matmul FLOPs one (query) head of `layer` costs in self-attention over `tokens` tokens.

    Its Q/K/V rows and output columns each cost 2·batch·tokens·(rows·cols); scores QKᵀ and the
    context P·V each cost 2·batch·tokens²·head_size. With grouped-query attention the K/V rows are
    shared by the group and not counted here (see `kv_head_flops`); the scores and context are per
    query head (repeat_kv expands K/V to every query head before the products).
    """
    head_size = adapter_for(model).attention_blocks(model)[layer].head_size
    return _head_projection_flops(model, layer, batch, tokens) + 2 * 2 * batch * tokens * tokens * head_size


def _head_projection_flops(model: nn.Module, layer: int, batch: int, tokens: int) -> int:
    """The part of `head_flops` spent in the head's projection rows and output columns."""
    adapter = adapter_for(model)
    return 2 * batch * tokens * sum(w.numel() for w in adapter.head_weights(model, layer, 0) if w.dim() == 2)


def kv_head_flops(model: nn.Module, layer: int, batch: int, tokens: int) -> int:
    """Matmul FLOPs of one KV head of a grouped-query layer: its K and V projection rows, 2·batch·tokens·(2·head
    size·hidden). Zero without grouped-query attention, where `head_flops` already counts them."""
    adapter = adapter_for(model)
    block = adapter.attention_blocks(model)[layer]
    if block.num_kv_heads == block.num_heads:
        return 0
    query_rows = adapter.head_weights(model, layer, 0)[0]  # [head size, hidden]: K and V rows have this shape
    return 2 * batch * tokens * 2 * query_rows.numel()


def _kv_heads_removed(block: AttentionBlock, removed: list[int]) -> int:
    """KV heads that go with query heads `removed` (current positions): those whose whole group goes."""
    if block.num_kv_heads == block.num_heads:
        return 0
    reason = gqa_removal_is_valid(block.num_heads, block.num_kv_heads, removed)
    if reason:
        raise UserInputError(f"layer {block.layer}: {reason}")
    group = block.num_heads // block.num_kv_heads
    drop = set(removed)
    return sum(all(h in drop for h in range(g * group, (g + 1) * group)) for g in range(block.num_kv_heads))


def predicted_flops(model: nn.Module, plan: PruningPlan, inputs: dict[str, torch.Tensor]) -> int:
    """FLOPs of `model` after `apply_plan(model, plan)`: measured now, minus what the removed heads cost
    (and, under grouped-query attention, the K/V rows of whole KV groups removed)."""
    adapter = adapter_for(model)
    shapes: list[torch.Size] = []  # what reaches attention: [batch, tokens, ...] (tokens differ from input for ViT)
    handle = adapter.output_projection(model, 0).register_forward_pre_hook(
        lambda _module, args: shapes.append(args[0].shape))
    try:
        total, by_module = _counted_flops(model, inputs)
    finally:
        handle.remove()
    batch, tokens = shapes[0][0], shapes[0][1]
    layers = adapter.layer_modules(model)
    for block, kept in zip(adapter.attention_blocks(model), plan.kept_heads, strict=True):
        removed = [i for i, h in enumerate(block.original_heads) if h not in set(kept)]
        # per query head: 2·2·batch·tokens²·head size when the counter sees them (see _attention_products_counted)
        products = _attention_products_counted(model, layers[block.layer], by_module) // block.num_heads
        total -= len(removed) * (_head_projection_flops(model, block.layer, batch, tokens) + products)
        total -= _kv_heads_removed(block, removed) * kv_head_flops(model, block.layer, batch, tokens)
    return total
