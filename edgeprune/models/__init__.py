"""Architecture adapters: one per family, found by `adapter_for(model)`. Each family's module registers its
adapter in ADAPTERS (edgeprune/models/bert.py, ...), loaded through the `edgeprune.families` entry points."""

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


__all__ = ["ADAPTERS", "AttentionBlock", "FeedForward", "FeedForwardLayout", "ModelAdapter", "NoFeedForwardError",
           "adapter_for"]
