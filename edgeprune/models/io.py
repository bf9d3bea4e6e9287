"""Save and load pruned Hugging Face models whose layers have different head counts and FFN widths.

transformers 5 builds every layer with `config.num_attention_heads` and `config.intermediate_size` and has
no `prune_heads`, so a pruned checkpoint cannot load through `from_pretrained`. `load` builds the dense
architecture from the config, cuts it to the kept heads and the per-layer FFN widths recorded there, then
loads the weights strictly.
"""

import copy
import json
from pathlib import Path

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY
from edgeprune.pruning.ffn import INTERMEDIATE_SIZES_CONFIG_KEY


def save(model: nn.Module, directory: str | Path) -> Path:
    """Write `model` (a transformers model, pruned or not) as config.json + model.safetensors."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise UserInputError(f"save takes a transformers model, got {type(model).__name__}; "
                             "for other modules save the state_dict with torch.save")
    _refresh_ffn_record(model)
    directory = Path(directory)
    # current key names: load reads the safetensors directly, without transformers' renaming of legacy keys
    model.save_pretrained(directory, save_original_format=False)
    return directory


def load(directory: str | Path, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Load a model written by `save` (or any transformers folder), with its per-layer head counts."""
    import transformers
    from safetensors.torch import load_file

    from edgeprune.models import adapter_for
    from edgeprune.pruning import PruningPlan, apply_plan

    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise UserInputError(f"{directory} has no config.json; is it a folder written by edgeprune.save?")
    config = transformers.AutoConfig.from_pretrained(directory)
    architectures = getattr(config, "architectures", None) or []
    model_cls = getattr(transformers, architectures[0], None) if architectures else None
    if model_cls is None:
        raise UserInputError(f"{directory}/config.json names no known architecture ({architectures})")
    kept = getattr(config, KEPT_HEADS_CONFIG_KEY, None)
    widths = getattr(config, INTERMEDIATE_SIZES_CONFIG_KEY, None)
    dense_config = copy.deepcopy(config)
    for key in (KEPT_HEADS_CONFIG_KEY, INTERMEDIATE_SIZES_CONFIG_KEY):
        if hasattr(dense_config, key):
            delattr(dense_config, key)
    model = model_cls(dense_config).to(dtype)
    if kept is not None:
        blocks = adapter_for(model).attention_blocks(model)
        apply_plan(model, PruningPlan([b.num_heads for b in blocks], [list(k) for k in kept]))
    if widths is not None:
        _cut_ffn_widths(model, [int(w) for w in widths], directory)
    state = {}
    index = directory / "model.safetensors.index.json"
    files = ["model.safetensors"]
    if index.exists():  # sharded checkpoint
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    for name in files:
        state.update(load_file(directory / name))
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or [])
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise UserInputError(f"{directory}: weights do not match the architecture (missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]})")
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return model.eval()


def _refresh_ffn_record(model: nn.Module) -> None:
    """Make the config's FFN widths true before writing it (layer removal does not update that record)."""
    from edgeprune.pruning.ffn import intermediate_sizes, record_sizes

    try:
        sizes = intermediate_sizes(model)
    except UserInputError:  # a family without FFN neuron removal (or no adapter): nothing to record
        return
    record_sizes(model, sizes)


def _cut_ffn_widths(model: nn.Module, widths: list[int], directory: Path) -> None:
    """Slice each layer's FFN of a freshly built dense model to its recorded width (the weights come next)."""
    from edgeprune.pruning.ffn import intermediate_sizes, remove_neurons

    dense = intermediate_sizes(model)
    if len(widths) != len(dense) or any(not 0 < w <= d for w, d in zip(widths, dense, strict=False)):
        raise UserInputError(f"{directory}/config.json: {INTERMEDIATE_SIZES_CONFIG_KEY} {widths} does not fit a "
                             f"model of {len(dense)} layers with FFN width {max(dense)}")
    remove_neurons(model, {layer: list(range(w, d)) for layer, (w, d) in enumerate(zip(widths, dense, strict=True))
                           if w < d})
