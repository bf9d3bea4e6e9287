"""Torch-Pruning (Fang et al., "DepGraph", CVPR 2023; PyPI `torch-pruning`) as a reference row for
benchmarks/criteria.py: one-shot removal of whole attention heads from the same MiniLM classifier, ranked
globally by its group magnitude or group Taylor importance, with no bias compensation (it has none).

Only Torch-Pruning's public API is used (MetaPruner with `num_heads`, `prune_num_heads=True`,
`prune_head_dims=False`, `head_pruning_ratio`, `global_pruning=True`); its dependency graph removes the query,
key and value rows and the output-projection columns of each head. Afterwards each BERT self-attention's head
count is set from the pruner's, as its Hugging Face examples do.
"""

import copy
from collections.abc import Iterable

import torch
from torch import nn

IMPORTANCES = ("magnitude", "taylor")


def torch_pruning_heads(teacher: nn.Module, ratio: float, importance: str, example: dict[str, torch.Tensor],
                        calibration: Iterable[dict[str, torch.Tensor]], loss_fn) -> tuple[nn.Module, int]:
    """A copy of `teacher` (an EncoderClassifier over a BERT) with `ratio` of its heads removed by Torch-Pruning;
    returns (model, heads removed). Taylor accumulates gradients of `loss_fn` over `calibration` first."""
    import torch_pruning as tp

    if importance not in IMPORTANCES:
        raise ValueError(f"importance must be one of {', '.join(IMPORTANCES)}, got {importance!r}")
    model = copy.deepcopy(teacher).eval()
    attentions = [layer.attention.self for layer in model.encoder.encoder.layer]
    heads = {}
    for attention in attentions:
        for projection in (attention.query, attention.key, attention.value):
            heads[projection] = attention.num_attention_heads
    before = sum(attention.num_attention_heads for attention in attentions)
    scorer = (tp.importance.GroupMagnitudeImportance(p=2) if importance == "magnitude"
              else tp.importance.GroupTaylorImportance())
    # Torch-Pruning removes heads only inside its width-pruning pass, which a zero width ratio skips: a width
    # ratio is given, every other layer is ignored and head dimensions are kept, so only whole heads go
    others = [m for m in model.modules() if isinstance(m, nn.Linear | nn.Embedding) and m not in heads]
    pruner = tp.pruner.MetaPruner(
        model, example, importance=scorer, global_pruning=True, pruning_ratio=0.5, num_heads=heads,
        prune_num_heads=True, prune_head_dims=False, head_pruning_ratio=ratio, ignored_layers=others,
        forward_fn=lambda module, inputs: module(**inputs), output_transform=lambda out: out[0].sum())
    if importance == "taylor":
        model.zero_grad()
        for batch in calibration:
            loss_fn(model, batch).backward()
    pruner.step()
    model.zero_grad(set_to_none=True)
    for attention in attentions:
        attention.num_attention_heads = pruner.num_heads[attention.query]
        attention.all_head_size = attention.query.out_features
    after = sum(attention.num_attention_heads for attention in attentions)
    return model.eval(), before - after
