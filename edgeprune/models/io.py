"""Save and load pruned models whose layers have different head counts, layer stacks and FFN widths.

transformers 5 builds every layer with `config.num_attention_heads` and `config.intermediate_size` and has
no `prune_heads`, so a pruned checkpoint cannot load through `from_pretrained`; a plain `nn.Module` with
pruned `nn.MultiheadAttention` cannot take its own state_dict back either. So every folder `save` writes holds
the weights and `edgeprune.json`: what was saved and its structure (`edgeprune.models.structure`). `load`
builds the dense module, cuts it to that structure, then loads the weights strictly. The folder kinds:

- transformers: a Hugging Face folder (config.json + model.safetensors); `load` builds the model from the
  config, with constructor options such as `add_pooling_layer=False` inferred from the saved weights.
- wrapper: edgeprune's deployable wrappers (`EncoderClassifier`, ...): the wrapped transformers model as above,
  plus edgeprune_head.safetensors with the wrapper's own layers; `load` rebuilds the wrapper around it.
- module: any other nn.Module, its state_dict in model.safetensors; `load(folder, model=fresh)` needs a fresh,
  unpruned instance of the same architecture to cut.

Folders without edgeprune.json (any transformers folder, or one written by an older edgeprune) load as
transformers folders, with the kept heads and FFN widths their config records.
"""

import copy
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models.base import INTERMEDIATE_SIZES_CONFIG_KEY, KEPT_HEADS_CONFIG_KEY
from edgeprune.models.classifier import (
    CausalLMLogits,
    EncoderClassifier,
    EncoderEmbedder,
    ImageClassifier,
    SequenceClassifier,
)
from edgeprune.models.hub import model_folder
from edgeprune.models.interop import (
    add_remote_code,
    copy_companion_files,
    source_folder,
    stock_class,
    strip_remote_code,
)
from edgeprune.models.structure import Structure, restore_structure, structure_of
from edgeprune.serialization import write_text_atomic

MANIFEST_NAME = "edgeprune.json"
WEIGHTS_NAME = "model.safetensors"
HEAD_WEIGHTS_NAME = "edgeprune_head.safetensors"
FORMAT_VERSION = 1
KINDS = ("transformers", "wrapper", "module")

# constructor flags of transformers models that add weights, and the key (prefix) present exactly when set
WEIGHT_FLAGS = {"add_pooling_layer": "pooler.", "use_mask_token": "embeddings.mask_token"}

# edgeprune's wrappers around one transformers model: (class, attribute holding the model, its own linear
# layers (each may be None), its plain options); every attribute is also the constructor argument of that name
WRAPPERS: dict[str, tuple[type[nn.Module], str, tuple[str, ...], tuple[str, ...]]] = {
    "EncoderClassifier": (EncoderClassifier, "encoder", ("classifier",), ()),
    "EncoderEmbedder": (EncoderEmbedder, "encoder", (), ("pooling", "normalize")),
    "SequenceClassifier": (SequenceClassifier, "model", (), ()),
    "CausalLMLogits": (CausalLMLogits, "model", (), ("context", "attention")),
    "ImageClassifier": (ImageClassifier, "model", ("classifier",), ()),
}


def save(model: nn.Module, directory: str | Path, *, source: str | Path | None = None) -> Path:
    """Write `model`, pruned or not, to `directory`; `load` reads it back with the same structure and outputs.

    A transformers model becomes a Hugging Face folder, an edgeprune wrapper (EncoderClassifier, ...) that
    folder plus its head, any other nn.Module its state_dict and structure (load it with `model=`). A Hugging Face
    folder also loads with stock `transformers.AutoModel.from_pretrained(directory, trust_remote_code=True)`
    (`edgeprune.models.interop`), and keeps the tokenizer and sentence-transformers files of `source`, the folder
    the model came from (default: the folder its config was read from, when that still exists)."""
    from transformers import PreTrainedModel

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UserInputError(f"cannot save to {directory}: it is a file, not a folder")
    wrapper = _wrapper_name(model)
    inner = None
    if isinstance(model, PreTrainedModel):
        inner = model
        manifest = {"kind": "transformers", "structure": _save_transformers(model, directory)}
    elif wrapper is not None:
        cls, attribute, linears, options = WRAPPERS[wrapper]
        inner = getattr(model, attribute)
        head = {k: v for k, v in model.state_dict().items() if not k.startswith(f"{attribute}.")}
        manifest = {"kind": "wrapper", "structure": _save_transformers(inner, directory),
                    "linears": {name: _linear_shape(getattr(model, name)) for name in linears},
                    "options": {name: getattr(model, name) for name in options}}
        _write_safetensors(_state_to_write(head), directory / HEAD_WEIGHTS_NAME)
    else:
        directory.mkdir(parents=True, exist_ok=True)
        manifest = {"kind": "module", "structure": _structure_or_none(model)}
        _write_safetensors(_state_to_write(model.state_dict()), directory / WEIGHTS_NAME)
    manifest = {"format": FORMAT_VERSION, "class": wrapper or type(model).__qualname__, **manifest}
    if manifest["structure"] is not None:
        manifest["structure"] = manifest["structure"].to_dict()
    if inner is not None:
        base = inner.base_model  # the flags of the base model the remote AutoModel class builds
        add_remote_code(inner, directory, construction_options(stock_class(type(base)), set(base.state_dict())))
        origin = source_folder(inner) if source is None else Path(source)
        if origin is not None and origin.is_dir():
            copy_companion_files(origin, directory)
    write_text_atomic(directory / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")  # never half a manifest
    return directory


def load(directory: str | Path, dtype: torch.dtype = torch.float32, *, model: nn.Module | None = None) -> nn.Module:
    """Load a folder written by `save` (or any Hugging Face folder), with its per-layer structure, in eval mode.

    `model`: a fresh, unpruned instance of the saved architecture, cut to the saved structure before the
    weights load into it (required for plain nn.Modules; optional otherwise). `dtype` applies to the
    modules `load` builds itself."""
    # a folder as it is, else a cached Hugging Face id; either way after the model families' plugins are loaded
    directory = model_folder(directory, "pass a folder written by edgeprune.save, or a Hugging Face model id")
    manifest = _read_manifest(directory)
    record = manifest.get("structure")
    structure = None if record is None else Structure.from_dict(record, str(directory / MANIFEST_NAME))
    kind = manifest["kind"]
    if kind == "transformers":
        return _load_transformers(directory, dtype, structure, model)
    if kind == "wrapper":
        return _load_wrapper(directory, dtype, structure, manifest, model)
    if model is None:
        raise UserInputError(f"{directory} holds a {manifest['class']} (a plain nn.Module); build a fresh, unpruned "
                             f"one and pass it: edgeprune.load({str(directory)!r}, model=...)")
    if structure is not None:
        restore_structure(model, structure, str(directory))
    load_weights(model, read_weights(directory), str(directory))
    return model.eval()


def load_weights(model: nn.Module, state: dict[str, torch.Tensor], source: str,
                 not_in_file: set[str] | frozenset[str] = frozenset()) -> None:
    """Load `state` into `model` strictly: every key of the model (except `not_in_file`) in the file, nothing
    else, same shapes. Keys that name a non-persistent buffer (position_ids, token_type_ids: older checkpoints
    saved them) are skipped; any other mismatch is a one-line UserInputError naming `source`."""
    expected = model.state_dict()
    nonpersistent = {name for name, _ in model.named_buffers()} - set(expected)
    state = {k: v for k, v in state.items() if k not in nonpersistent}
    wrong = [f"{k} is {list(state[k].shape)} in the file but {list(v.shape)} in the model"
             for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if wrong:
        raise UserInputError(f"{source}: weights do not match the architecture ({len(wrong)} of another shape; "
                             f"{wrong[0]})")
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in not_in_file]
    if missing or unexpected:
        raise UserInputError(f"{source}: weights do not match the architecture (missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]})")


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The tensors of model.safetensors (or of every shard its index names)."""
    index = directory / "model.safetensors.index.json"
    if index.exists():
        data = _read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict):
            raise UserInputError(f"{index} has no weight_map; save the model again")
        files = sorted(set(weight_map.values()))
    elif (directory / WEIGHTS_NAME).is_file():
        files = [WEIGHTS_NAME]
    else:
        raise UserInputError(f"{directory} has no {WEIGHTS_NAME}; is it a folder written by edgeprune.save?")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(_read_safetensors(directory / name))
    return state


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UserInputError(f"{path} is not valid JSON ({_one_line(error)})") from None
    except OSError as error:
        raise UserInputError(f"cannot read {path}: {_one_line(error)}") from None


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise UserInputError(f"{path} is missing; save the model again")
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise UserInputError(f"{path} is not a readable safetensors file ({_one_line(error)}); it may be "
                             "truncated or corrupt: save the model again") from None


def _write_safetensors(state: dict[str, torch.Tensor], path: Path) -> None:
    from safetensors.torch import save_file

    save_file(state, path, metadata={"format": "pt"})


def _state_to_write(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state_dict as safetensors takes it: contiguous, and tensors that share memory (tied weights) copied."""
    seen: set[int] = set()
    state = {}
    for key, tensor in state_dict.items():
        tensor = tensor.detach().contiguous()
        pointer = tensor.untyped_storage().data_ptr()
        if pointer in seen:
            tensor = tensor.clone()
        seen.add(pointer)
        state[key] = tensor
    return state


def _read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST_NAME
    if not path.exists():  # a Hugging Face folder, or one written before edgeprune.json existed
        return {"kind": "transformers", "class": "", "structure": None}
    manifest = _read_json(path)
    if not isinstance(manifest, dict) or manifest.get("kind") not in KINDS:
        raise UserInputError(f"{path}: not a record edgeprune.save wrote (kind must be one of {', '.join(KINDS)})")
    if not isinstance(manifest.get("format"), int) or manifest["format"] > FORMAT_VERSION:
        raise UserInputError(f"{path}: format {manifest.get('format')!r} is not one this edgeprune reads "
                             f"(up to {FORMAT_VERSION}); upgrade edgeprune")
    manifest.setdefault("class", "")
    manifest.setdefault("structure", None)
    return manifest


def _structure_or_none(model: nn.Module) -> Structure | None:
    try:
        return structure_of(model)
    except UserInputError:  # no adapter understands it: the weights alone describe it
        return None


def _save_transformers(model: nn.Module, directory: Path) -> Structure | None:
    _refresh_ffn_record(model)
    # current key names: load reads the safetensors directly, without transformers' renaming of legacy keys
    model.save_pretrained(directory, save_original_format=False)
    return _structure_or_none(model)


def _read_config(directory: Path) -> Any:
    import transformers

    path = directory / "config.json"
    if not path.is_file():
        raise UserInputError(f"{directory} has no config.json; is it a folder written by edgeprune.save?")
    if not isinstance(_read_json(path), dict):
        raise UserInputError(f"{path} does not hold a JSON object; is it a model config?")
    try:
        return transformers.AutoConfig.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserInputError(f"{path}: not a config transformers can read ({_one_line(error)})") from None


def architecture_class(config: Any, name: str) -> type | None:
    """The model class config.json names: transformers', else the one beside the config's own class (a model family's
    plugin that registered its architecture with transformers' Auto classes defines both in its module)."""
    import transformers

    found = getattr(transformers, name, None)
    if found is None:
        found = getattr(sys.modules.get(type(config).__module__), name, None)
    return found if isinstance(found, type) else None


def construction_options(model_cls: type, keys: set[str]) -> dict[str, bool]:
    """Constructor flags of `model_cls` that add weights (`add_pooling_layer`, `use_mask_token`), set the way the
    saved `keys` show they were."""
    parameters = inspect.signature(model_cls.__init__).parameters
    return {flag: any(key.startswith(marker) for key in keys)
            for flag, marker in WEIGHT_FLAGS.items() if flag in parameters}


def _load_transformers(directory: Path, dtype: torch.dtype, structure: Structure | None,
                       model: nn.Module | None) -> nn.Module:
    from transformers import PreTrainedModel

    config = _read_config(directory)
    architectures = getattr(config, "architectures", None) or []
    state = read_weights(directory)
    if model is None:
        model_cls = architecture_class(config, architectures[0]) if architectures else None
        if model_cls is None:
            raise UserInputError(f"{directory}/config.json names no known architecture ({architectures})")
        dense_config = _dense_config(config, structure)
        model = model_cls(dense_config, **construction_options(model_cls, set(state))).to(dtype)
    elif not isinstance(model, PreTrainedModel):
        raise UserInputError(f"{directory} holds a transformers model ({', '.join(architectures)}), but the given "
                             f"module is a {type(model).__name__}; pass a fresh one of that class, or no model")
    if structure is None:
        structure = _structure_from_config(model, config)
    else:
        _check_config_agrees(config, structure, directory)
    if structure is not None:
        restore_structure(model, structure, str(directory))
    tied = getattr(model, "all_tied_weights_keys", None)
    if tied is None:
        tied = getattr(model, "_tied_weights_keys", None) or []
    load_weights(model, state, str(directory), set(tied))
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    return model.eval()


def _dense_config(config: Any, structure: Structure | None) -> Any:
    """`config` without edgeprune's records, its FFN width the dense model's where the structure knows it, so the
    model built from it is the dense one that the structure is cut from."""
    from edgeprune.models import ADAPTERS

    dense_config = copy.deepcopy(config)
    strip_remote_code(dense_config)
    for key in (KEPT_HEADS_CONFIG_KEY, INTERMEDIATE_SIZES_CONFIG_KEY):
        if hasattr(dense_config, key):
            delattr(dense_config, key)
    if structure is not None and structure.ffn_dense_widths and structure.family in ADAPTERS:
        width_config = ADAPTERS.get(structure.family).ffn_width_config
        if width_config is not None and hasattr(dense_config, width_config):
            setattr(dense_config, width_config, max(structure.ffn_dense_widths))
    return dense_config


def _structure_from_config(model: nn.Module, config: Any) -> Structure | None:
    """The structure an older folder's config records (kept heads, FFN widths), for the dense `model`."""
    from edgeprune.models import adapter_for

    kept = getattr(config, KEPT_HEADS_CONFIG_KEY, None)
    widths = getattr(config, INTERMEDIATE_SIZES_CONFIG_KEY, None)
    if kept is None and widths is None:
        return None
    adapter = adapter_for(model)
    counts = [block.num_heads for block in adapter.attention_blocks(model)]
    kept = [list(range(n)) for n in counts] if kept is None else [[int(h) for h in heads] for heads in kept]
    return Structure(adapter.family, counts, kept, ffn_widths=None if widths is None else [int(w) for w in widths])


def _check_config_agrees(config: Any, structure: Structure, directory: Path) -> None:
    """The config's own records (read by other tools) and edgeprune.json must describe the same model."""
    for key, recorded, name in ((KEPT_HEADS_CONFIG_KEY, structure.kept_heads, "kept heads"),
                                (INTERMEDIATE_SIZES_CONFIG_KEY, structure.ffn_widths, "FFN widths")):
        value = getattr(config, key, None)
        if value is not None and recorded is not None and json.loads(json.dumps(value)) != recorded:
            raise UserInputError(f"{directory}: config.json records {name} {value} ({key}) but {MANIFEST_NAME} "
                                 f"{recorded}; the folder was edited after saving, save the model again")


def _wrapper_name(model: nn.Module) -> str | None:
    """The WRAPPERS entry `model` is exactly (holding a transformers model and nothing unrecorded), else None."""
    from transformers import PreTrainedModel

    for name, (cls, attribute, linears, _options) in WRAPPERS.items():
        if type(model) is not cls or not isinstance(getattr(model, attribute, None), PreTrainedModel):
            continue
        known = {attribute, *linears}
        if all(key.split(".")[0] in known for key in model.state_dict()) and all(
                getattr(model, n) is None or type(getattr(model, n)) is nn.Linear for n in linears):
            return name
    return None


def _linear_shape(linear: nn.Linear | None) -> list[Any] | None:
    return None if linear is None else [linear.in_features, linear.out_features, linear.bias is not None]


def _load_wrapper(directory: Path, dtype: torch.dtype, structure: Structure | None, manifest: dict[str, Any],
                  model: nn.Module | None) -> nn.Module:
    name = manifest["class"]
    if name not in WRAPPERS:
        raise UserInputError(f"{directory / MANIFEST_NAME}: unknown wrapper {name!r}; known: {', '.join(WRAPPERS)}")
    cls, attribute, linears, options = WRAPPERS[name]
    if model is not None and not isinstance(model, cls):
        raise UserInputError(f"{directory} holds an {name}, but the given module is a {type(model).__name__}")
    inner = _load_transformers(directory, dtype, structure, None if model is None else getattr(model, attribute))
    if model is None:
        try:
            shapes = {n: manifest["linears"][n] for n in linears}
            arguments = {n: None if s is None else nn.Linear(int(s[0]), int(s[1]), bias=bool(s[2]), dtype=dtype)
                         for n, s in shapes.items()}
            arguments.update({n: manifest["options"][n] for n in options})
            model = cls(**{attribute: inner}, **arguments)
        except (KeyError, TypeError, ValueError, IndexError) as error:
            raise UserInputError(f"{directory / MANIFEST_NAME}: the {name} record is malformed "
                                 f"({type(error).__name__}: {_one_line(error)})") from None
    head_file = directory / HEAD_WEIGHTS_NAME
    load_weights(model, _read_safetensors(head_file), str(head_file),
                 {k for k in model.state_dict() if k.startswith(f"{attribute}.")})
    return model.eval()


def _refresh_ffn_record(model: nn.Module) -> None:
    """Make the config's FFN widths true before writing it (layer removal does not update that record)."""
    from edgeprune.models import adapter_for

    try:
        adapter = adapter_for(model)
        widths = [block.width for block in adapter.feed_forwards(model)]
    except UserInputError:  # no adapter, or no feed-forward blocks: nothing to record
        return
    adapter.record_ffn_widths(model, widths)
