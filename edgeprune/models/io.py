"""Save and load pruned Hugging Face models whose layers have different head counts.

transformers 5 builds every layer with `config.num_attention_heads` and has no `prune_heads`, so a
pruned checkpoint cannot load through `from_pretrained`. `load` builds the dense architecture from
the config, cuts it to the kept heads recorded there, then loads the weights strictly.
"""

import copy
import json
from pathlib import Path

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY


def save(model: nn.Module, directory: str | Path) -> Path:
    """Write `model` (a transformers model, pruned or not) as config.json + model.safetensors."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise UserInputError(f"save takes a transformers model, got {type(model).__name__}; "
                             "for other modules save the state_dict with torch.save")
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
    dense_config = copy.deepcopy(config)
    if kept is not None:
        delattr(dense_config, KEPT_HEADS_CONFIG_KEY)
    model = model_cls(dense_config).to(dtype)
    if kept is not None:
        blocks = adapter_for(model).attention_blocks(model)
        apply_plan(model, PruningPlan([b.num_heads for b in blocks], [list(k) for k in kept]))
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
