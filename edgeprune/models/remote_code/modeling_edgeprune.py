"""Layers of different widths for a model pruned by edgeprune, loadable with stock transformers.

transformers builds every layer with the config's head count and FFN width, but a pruned model keeps, per layer,
only some of its attention heads (and key/value heads) and some of its FFN neurons, so its weights fit no stock
model. The classes at the end of this file subclass the stock transformers classes: they build the model as usual,
then give each layer's projections the widths that its config lists per layer (the `edgeprune_*` keys of
config.json). The stock forward code then runs unchanged: it reshapes by head size, not by head count, and the hidden
size does not change.

    from transformers import AutoModel
    model = AutoModel.from_pretrained("this-folder", trust_remote_code=True)

edgeprune.save wrote this file into the model's folder and named its classes in config.json's `auto_map`. It needs
only torch and transformers (5.x); it does not import edgeprune.
"""

import inspect
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class LayerLayout:
    """Where one family's transformer layer keeps its attention and feed-forward parts (dotted paths from a layer)."""

    attention: str  # the attention module, holding the head-count attributes
    query: str
    key: str
    value: str
    output: str  # maps the concatenated heads back to the hidden size
    head_size: str  # attribute of `attention`: the size of one head
    head_count: tuple[str, ...]  # attributes of `attention` that hold its number of query heads
    head_width: tuple[str, ...] = ()  # attributes of `attention` that hold query heads x head size
    kv_head_count: tuple[str, ...] = ()  # attributes of `attention` that hold its number of key/value heads
    ffn_inputs: tuple[str, ...] = ()  # the FFN's input projections (gate and up for a gated MLP)
    ffn_output: str = ""
    ffn_owner: str = ""  # module holding `ffn_width` ("" is the layer)
    ffn_width: tuple[str, ...] = ()  # attributes of `ffn_owner` that hold the FFN width


# where each family keeps its parts; edgeprune.save adds the layout of this folder's family at the end of the file
# (its adapter's `remote_layout`)
LAYOUTS: dict[str, LayerLayout] = {}

# the config keys this file reads; None (or absent) means "as the stock config builds it"
PER_LAYER_KEYS = ("edgeprune_heads_per_layer", "edgeprune_kv_heads_per_layer", "edgeprune_ffn_widths",
                  "edgeprune_attention_output_bias", "edgeprune_ffn_output_bias")


def _find(root: nn.Module, path: str) -> object:
    for part in filter(None, path.split(".")):
        root = getattr(root, part, None)
    return root


def _replace(root: nn.Module, path: str, module: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(_find(root, parent), name, module)


def transformer_layers(model: nn.Module, layout: LayerLayout) -> list[nn.Module]:
    """The layers of `model` in order: every module holding the layout's four attention projections."""
    paths = (layout.query, layout.key, layout.value, layout.output)
    return [m for m in model.modules() if all(isinstance(_find(m, p), nn.Linear) for p in paths)]


def _resize(layer: nn.Module, path: str, in_features: int | None = None, out_features: int | None = None,
            bias: bool | None = None) -> None:
    """Give the linear at `path` a new shape (None: as it is). Its values do not matter: the saved weights load next."""
    old = _find(layer, path)
    shape = (in_features or old.in_features, out_features or old.out_features,
             old.bias is not None if bias is None else bool(bias))
    if shape != (old.in_features, old.out_features, old.bias is not None):
        _replace(layer, path, nn.Linear(*shape, device=old.weight.device, dtype=old.weight.dtype))


def _per_layer(config: object, key: str, count: int) -> list | None:
    values = getattr(config, key, None)
    if values is not None and len(values) != count:
        raise ValueError(f"config.json's {key} lists {len(values)} layers, but the model has {count}; the folder "
                         "was edited after edgeprune saved it")
    return values


def resize_layers(model: nn.Module, config: object, family: str) -> None:
    """Give every layer of a freshly built `model` the head counts, FFN widths and biases its config lists."""
    layout = LAYOUTS[family]
    layers = transformer_layers(model, layout)
    heads, kv_heads, widths, output_bias, ffn_output_bias = (_per_layer(config, key, len(layers))
                                                             for key in PER_LAYER_KEYS)
    for index, layer in enumerate(layers):
        attention = _find(layer, layout.attention)
        size = getattr(attention, layout.head_size)
        if heads is not None:
            queries = int(heads[index])
            keys = queries if kv_heads is None else int(kv_heads[index])
            _resize(layer, layout.query, out_features=queries * size)
            _resize(layer, layout.key, out_features=keys * size)
            _resize(layer, layout.value, out_features=keys * size)
            _resize(layer, layout.output, in_features=queries * size)
            for names, value in ((layout.head_count, queries), (layout.head_width, queries * size),
                                 (layout.kv_head_count, keys)):
                for name in names:
                    if hasattr(attention, name):
                        setattr(attention, name, value)
            if hasattr(attention, "num_key_value_groups"):  # how often each key/value head is repeated
                attention.num_key_value_groups = queries // keys
        if output_bias is not None:
            _resize(layer, layout.output, bias=output_bias[index])
        if widths is not None:
            for path in layout.ffn_inputs:
                _resize(layer, path, out_features=int(widths[index]))
            _resize(layer, layout.ffn_output, in_features=int(widths[index]))
            owner = _find(layer, layout.ffn_owner)
            for name in layout.ffn_width:
                if hasattr(owner, name):
                    setattr(owner, name, int(widths[index]))
        if ffn_output_bias is not None:
            _resize(layer, layout.ffn_output, bias=ffn_output_bias[index])


def with_saved_options(model_class: type, config: object, args: tuple, kwargs: dict) -> dict:
    """`kwargs` plus the constructor flags the saved weights were built with (`add_pooling_layer=False` for a model
    saved without its pooler), unless the caller passed them."""
    parameters = list(inspect.signature(model_class.__init__).parameters)[2:]  # after self and config
    given = set(parameters[:len(args)]) | set(kwargs)
    saved = getattr(config, "edgeprune_construction_options", None) or {}
    return {**{k: v for k, v in saved.items() if k in parameters and k not in given}, **kwargs}
