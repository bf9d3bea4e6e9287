"""Architecture adapters: one per family, found by `adapter_for(model)`. Each family's module registers its
adapter in ADAPTERS (edgeprune/models/bert.py, ...), loaded through the `edgeprune.families` entry points."""

from collections.abc import Callable

from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models.base import (
    ADAPTERS,
    AttentionBlock,
    FeedForward,
    FeedForwardLayout,
    ModelAdapter,
    NoFeedForwardError,
)


def adapter_for(model: nn.Module) -> ModelAdapter:
    for name in ADAPTERS:
        adapter_cls = ADAPTERS.get(name)
        if adapter_cls.matches(model):
            return adapter_cls()
    raise UserInputError(
        f"{type(model).__name__} is not a supported architecture; supported families: "
        f"{', '.join(ADAPTERS.names())}. Add one by subclassing edgeprune.models.ModelAdapter in a module that "
        "registers it in edgeprune.models.ADAPTERS, named in your package's `edgeprune.families` entry points"
    )


class LayersDone(Exception):
    """Raised out of the last layer's forward hook by `forward_through_layers`: the rest of the forward is not
    needed."""


def forward_through_layers(model: nn.Module, call: Callable[[], object]) -> None:
    """Run `call`, a forward of `model`, only as far as the output of its last layer: for measurements taken inside
    the layers (head means, neuron statistics, layer distances, the head criteria's statistics). What follows the
    layers is skipped: a decoder's output layer is 21 % of SmolLM2-135M's forward at 128 tokens (49,152 × 576 of
    its 134 M parameters), worked for logits nobody reads. Hooks registered on the last layer before this call
    still run; the forward ends by an exception out of a hook, since a module's forward has no early exit."""
    layers = adapter_for(model).layer_modules(model)
    if not layers:
        call()
        return

    def stop(_module: nn.Module, _args: tuple, _output: object) -> None:
        raise LayersDone

    handle = layers[-1].register_forward_hook(stop)
    try:
        call()
    except LayersDone:
        pass
    finally:
        handle.remove()


__all__ = ["ADAPTERS", "AttentionBlock", "FeedForward", "FeedForwardLayout", "ModelAdapter", "NoFeedForwardError",
           "LayersDone", "adapter_for", "forward_through_layers"]
