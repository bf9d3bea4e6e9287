"""The interface every architecture adapter implements.

An adapter knows one family's layout. Criteria and surgery only use these methods, so a new family
is one new file: list the blocks and feed-forwards, expose each head's output and attention probabilities
through hooks, and slice real weights.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.plugins import FAMILIES_GROUP
from edgeprune.registry import Registry

# config attribute recording, per layer, which of the dense model's heads remain (saved in config.json)
KEPT_HEADS_CONFIG_KEY = "edgeprune_kept_heads"
# attribute of an nn.ModuleList of layers once some were removed: (its dense layer count, dense positions kept)
KEPT_LAYERS_ATTRIBUTE = "edgeprune_kept_layers"
# config attribute holding each layer's FFN width when they differ (saved in config.json)
INTERMEDIATE_SIZES_CONFIG_KEY = "edgeprune_intermediate_sizes"
# attribute of a feed-forward block's owner once neurons were cut from it: its width in the dense model
DENSE_FFN_WIDTH_ATTRIBUTE = "edgeprune_dense_ffn_width"

# fn(layer, per-head context [batch, tokens, heads, head_size]) -> the context to use instead
HeadOutputFn = Callable[[int, torch.Tensor], torch.Tensor]
# fn(layer, attention probabilities [batch, heads, query tokens, key tokens])
AttentionProbsFn = Callable[[int, torch.Tensor], None]
# fn(layer, FFN activations [..., neurons], the output projection's input) -> the activations to use instead
FeedForwardFn = Callable[[int, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class AttentionBlock:
    """One attention module as it is now (after any pruning)."""

    layer: int
    num_heads: int  # query heads
    num_kv_heads: int  # key/value heads (= num_heads without grouped-query attention)
    head_size: int
    original_heads: tuple[int, ...]  # for each current query head, its index in the dense model
    dense_heads: int = 0  # query heads of this layer in the dense model (0: unknown, see dense_head_count)


class NoFeedForwardError(UserInputError):
    """The model (or one of its layers) has no feed-forward block its adapter can cut neurons from."""


@dataclass(frozen=True)
class FeedForward:
    """One layer's feed-forward block as it is now. Neuron j is row j (weight and bias) of every input projection
    and column j of the output projection; everything between them acts element-wise, so slicing those rows and
    that column removes exactly neuron j's contribution."""

    inputs: tuple[nn.Linear, ...]  # (up,), or (gate, up) for a gated MLP: output(activation(gate(x)) * up(x))
    activation: Callable[[torch.Tensor], torch.Tensor]  # applied to the first input projection's output
    output: nn.Linear  # reads the activations, [..., width] -> hidden size
    owner: nn.Module  # the module holding the parts
    width_attribute: str | None = None  # attribute of `owner` stating the width (a gated MLP's intermediate_size)

    @property
    def width(self) -> int:
        return self.output.in_features

    @property
    def dense_width(self) -> int:
        """The width this block had in the dense model (its width now when no neuron was cut)."""
        return int(getattr(self.owner, DENSE_FFN_WIDTH_ATTRIBUTE, self.width))

    def record_dense_width(self, width: int) -> None:
        """Note on the owner the width this block had in the dense model (edgeprune.save writes it)."""
        setattr(self.owner, DENSE_FFN_WIDTH_ATTRIBUTE, int(width))

    def activations(self, hidden: torch.Tensor) -> torch.Tensor:
        """What the output projection reads for `hidden` (the layer's FFN input), computed from the parts."""
        values = self.activation(self.inputs[0](hidden))
        for linear in self.inputs[1:]:
            values = values * linear(hidden)
        return values


@dataclass(frozen=True)
class FeedForwardLayout:
    """Dotted paths from one transformer layer to its feed-forward parts ("" is the layer itself)."""

    inputs: tuple[str, ...]
    activation: str
    output: str
    owner: str = ""
    width_attribute: str | None = None

    def find(self, layer: nn.Module, index: int, family: str) -> FeedForward:
        """The parts of `layer` (position `index`); NoFeedForwardError where they are not there."""
        parts = [_attribute(layer, path) for path in (*self.inputs, self.output)]
        activation = _attribute(layer, self.activation)
        owner = _attribute(layer, self.owner)
        if not all(isinstance(p, nn.Linear) for p in parts) or not callable(activation) or owner is None:
            paths = ", ".join((*self.inputs, self.activation, self.output))
            raise NoFeedForwardError(f"layer {index} ({type(layer).__name__}) has no feed-forward block where the "
                                     f"{family} adapter looks ({paths}), so its FFN neurons cannot be removed")
        *inputs, output = parts
        for linear in inputs:
            if linear.out_features != output.in_features:
                raise UserInputError(f"layer {index}: an FFN input projection has {linear.out_features} outputs but "
                                     f"the output projection takes {output.in_features} inputs")
        return FeedForward(tuple(inputs), activation, output, owner, self.width_attribute)


def _attribute(root: object, path: str) -> object | None:
    for part in filter(None, path.split(".")):
        root = getattr(root, part, None)
    return root


def dense_head_count(blocks: list[AttentionBlock]) -> int:
    """Width of a [layers, heads] score array indexed by dense heads."""
    return max(max(b.dense_heads, max(b.original_heads) + 1) for b in blocks)


class ModelAdapter(ABC):
    """Knows one architecture family: where its heads are and how to cut them out for real."""

    family: str = ""
    # where the remote code a saved folder carries (models/remote_code/modeling_edgeprune.py, which cannot import
    # edgeprune) finds this family's parts: the keyword arguments of its LayerLayout, written into the file by
    # edgeprune.save; None: the family's pruned folders load through edgeprune only
    remote_layout: dict | None = None
    separate_kv_heads: bool = False  # layers keep key/value heads apart from query heads (grouped-query attention)
    ffn_width_config: str | None = "intermediate_size"  # config attribute holding the FFN width (None: no config)

    @classmethod
    @abstractmethod
    def matches(cls, model: nn.Module) -> bool:
        """True when this adapter understands `model`."""

    @abstractmethod
    def attention_blocks(self, model: nn.Module) -> list[AttentionBlock]:
        """The attention blocks in layer order."""

    @abstractmethod
    def layer_modules(self, model: nn.Module) -> list[nn.Module]:
        """The transformer layers in order; each maps hidden states to hidden states."""

    @abstractmethod
    def feed_forwards(self, model: nn.Module) -> list[FeedForward]:
        """Each layer's feed-forward block, in the order of `layer_modules` (FFN layer i is layer i); a
        NoFeedForwardError that names the layer where one has none."""

    def feed_forward_hook(self, model: nn.Module, fn: FeedForwardFn) -> AbstractContextManager[None]:
        """Context in which every layer's FFN activations pass through `fn` before the output projection
        (statistics and mean replacement build on this). Families whose fast paths would skip the hooks, or hand
        them something other than plain tensors, override it to turn those paths off meanwhile."""
        handles = []
        for index, block in enumerate(self.feed_forwards(model)):
            def replace(_module: nn.Module, args: tuple, index: int = index) -> tuple:
                (values, *rest) = args
                return (fn(index, values), *rest)

            handles.append(block.output.register_forward_pre_hook(replace))
        return hooks_removed_after(handles)

    def record_ffn_widths(self, model: nn.Module, widths: list[int]) -> None:
        """Keep the config true about FFN widths: `ffn_width_config` is the width when every layer has the same
        one; otherwise it is the widest and the per-layer widths are recorded under INTERMEDIATE_SIZES_CONFIG_KEY."""
        config = find_config(model)
        if config is None or self.ffn_width_config is None or not widths:
            return
        if len(set(widths)) == 1:
            setattr(config, self.ffn_width_config, widths[0])
            if hasattr(config, INTERMEDIATE_SIZES_CONFIG_KEY):
                delattr(config, INTERMEDIATE_SIZES_CONFIG_KEY)
        else:
            setattr(config, self.ffn_width_config, max(widths))
            setattr(config, INTERMEDIATE_SIZES_CONFIG_KEY, list(widths))

    @abstractmethod
    def head_output_hook(self, model: nn.Module, fn: HeadOutputFn) -> AbstractContextManager[None]:
        """Context in which every layer's per-head attention output passes through `fn` before the
        output projection (gating, ablation and capture all build on this)."""

    @abstractmethod
    def attention_probs_hook(self, model: nn.Module, fn: AttentionProbsFn) -> AbstractContextManager[None]:
        """Context in which `fn` sees every layer's attention probabilities."""

    @abstractmethod
    def output_projection(self, model: nn.Module, layer: int) -> nn.Linear:
        """The linear that maps concatenated head outputs back to the hidden size (columns by head)."""

    @abstractmethod
    def head_weights(self, model: nn.Module, layer: int, head: int) -> list[torch.Tensor]:
        """Views of the weights head `head` (current position) owns: its Q/K/V rows, output columns."""

    @abstractmethod
    def remove_heads(self, model: nn.Module, layer: int, heads: list[int]) -> None:
        """Slice the given heads (current positions in `layer`) out of the real weights."""

    @abstractmethod
    def remove_layers(self, model: nn.Module, layers: list[int]) -> None:
        """Drop whole layers (current positions), keeping the config's layer count true."""

    @abstractmethod
    def head_parameter_count(self, model: nn.Module, layer: int) -> int:
        """Parameters that one head of `layer` owns (weights and biases it takes with it)."""

    def removed_parameter_count(self, model: nn.Module, layer: int, heads: list[int]) -> int:
        """Parameters that go when `heads` (current positions) of `layer` are removed together.

        Families whose heads share weights (grouped-query attention shares K/V) override this.
        """
        return len(heads) * self.head_parameter_count(model, layer)

    def add_output_bias(self, model: nn.Module, layer: int) -> None:
        """Give `layer`'s output projection a zero bias if it has none (bias compensation folds removed heads'
        mean outputs into it). Families whose config describes that bias override this to keep it true."""
        projection = self.output_projection(model, layer)
        if projection.bias is None:
            weight = projection.weight
            projection.bias = nn.Parameter(torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device),
                                           requires_grad=weight.requires_grad)

    @contextmanager
    def gate_heads(self, model: nn.Module, gates: torch.Tensor) -> Iterator[None]:
        """Context in which head h of layer l is multiplied by `gates[l, h]` (current positions)."""

        def scale(layer: int, context: torch.Tensor) -> torch.Tensor:
            return context * gates[layer, : context.shape[2], None]

        with self.head_output_hook(model, scale):
            yield


def find_config(model: nn.Module) -> object | None:
    """The transformers config of `model`: the first module holding one (a `model_type` says so; the head count's
    name is the family's own: `num_attention_heads` in BERT, another in a plugin's architecture)."""
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and hasattr(config, "model_type"):
            return config
    return None


def recorded_heads(model: nn.Module, current_counts: list[int]) -> list[list[int]]:
    """Per layer, the dense indices of the heads still present: the config's record, else all of them."""
    kept = getattr(find_config(model), KEPT_HEADS_CONFIG_KEY, None)
    if kept is None:
        return [list(range(count)) for count in current_counts]
    return [list(heads) for heads in kept]


def record_heads(model: nn.Module, heads: list[list[int]]) -> None:
    """Store the kept dense head indices per layer in the config (saved in config.json)."""
    config = find_config(model)
    if config is not None:
        setattr(config, KEPT_HEADS_CONFIG_KEY, heads)


def drop_layers(model: nn.Module, layers: list[nn.Module], drop: set[int]) -> nn.ModuleList:
    """Replace the nn.ModuleList holding `layers` by one without positions `drop`; returns the new list.

    Refuses unknown positions and removing every layer. The record of kept heads follows the layers.
    """
    if not drop <= set(range(len(layers))) or len(drop) >= len(layers):
        raise ValueError(f"can remove some of layers 0..{len(layers) - 1} but not all; got {sorted(drop)}")
    container = next(m for m in model.modules() if isinstance(m, nn.ModuleList) and layers[0] in list(m))
    kept = nn.ModuleList(m for i, m in enumerate(container) if i not in drop)
    dense, positions = kept_layer_record(container)
    record_kept_layers(kept, dense, [p for i, p in enumerate(positions) if i not in drop])
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if child is container:
                setattr(parent, name, kept)
    config = find_config(model)
    if config is not None:
        config.num_hidden_layers = len(kept)
        recorded = getattr(config, KEPT_HEADS_CONFIG_KEY, None)
        if recorded is not None:
            record_heads(model, [h for i, h in enumerate(recorded) if i not in drop])
    return kept


def kept_layer_record(container: nn.ModuleList) -> tuple[int, list[int]]:
    """(layers the stack had before any removal, their positions that remain); all of them when nothing is recorded."""
    record = getattr(container, KEPT_LAYERS_ATTRIBUTE, None)
    if record is None or len(record[1]) != len(container):
        return len(container), list(range(len(container)))
    return int(record[0]), [int(p) for p in record[1]]


def record_kept_layers(container: nn.ModuleList, dense: int, kept: list[int]) -> None:
    """Note on a stack of layers which positions of its `dense` layers it still holds (edgeprune.save writes it)."""
    setattr(container, KEPT_LAYERS_ATTRIBUTE, (dense, list(kept)))


def heads_to_keep(layer: int, current: int, heads: list[int]) -> list[int]:
    """Current positions that stay when `heads` go; refuses unknown heads and removing every head."""
    drop = set(heads)
    absent = sorted(drop - set(range(current)))
    if absent:
        raise ValueError(f"layer {layer} has heads 0..{current - 1}; cannot remove {absent}")
    keep = [h for h in range(current) if h not in drop]
    if not keep:
        raise ValueError(f"layer {layer}: removing all {current} heads would leave no attention; keep at least one")
    return keep


def head_rows(keep: list[int], size: int) -> torch.Tensor:
    """Indices of the projection rows (or columns) that belong to the kept heads."""
    return torch.cat([torch.arange(h * size, (h + 1) * size) for h in keep])


def split_heads_before(projections: list[tuple[nn.Module, int]], fn: HeadOutputFn) -> AbstractContextManager[None]:
    """Pre-hooks on each layer's output projection (with its head size) that pass its input, viewed as
    [batch, tokens, heads, head_size], through `fn`."""
    handles = []
    for index, (projection, size) in enumerate(projections):
        def per_head(_module: nn.Module, args: tuple, index: int = index, size: int = size) -> tuple:
            (context, *rest) = args
            return (fn(index, context.unflatten(-1, (-1, size))).flatten(-2), *rest)

        handles.append(projection.register_forward_pre_hook(per_head))
    return hooks_removed_after(handles)


def capture_attention_probs(attentions: list[nn.Module], fn: AttentionProbsFn) -> AbstractContextManager[None]:
    """Forward hooks on attention modules that return (context, probabilities), handing the probabilities to `fn`."""
    handles = []
    for index, attention in enumerate(attentions):
        def capture(_module: nn.Module, _args: tuple, output: tuple, index: int = index) -> None:
            if output[1] is None:
                raise RuntimeError("attention probabilities are unavailable; load the model with "
                                   "attn_implementation='eager'")
            fn(index, output[1])

        handles.append(attention.register_forward_hook(capture))
    return hooks_removed_after(handles)


@contextmanager
def frozen_parameters(model: nn.Module) -> Iterator[None]:
    """Turn off parameter gradients for a scoring pass, restoring the flags afterwards."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


@contextmanager
def hooks_removed_after(handles: list) -> Iterator[None]:
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# one registry per family of parts (edgeprune/registry.py): each family's module registers its adapter as it is
# imported, named in the `edgeprune.families` entry-point group (edgeprune.plugins), edgeprune's own as a third party's
ADAPTERS: Registry[type[ModelAdapter]] = Registry("model family", plugins=FAMILIES_GROUP)
