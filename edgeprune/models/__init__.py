"""Architecture adapters: one per family, found by `adapter_for(model)`."""

from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models.base import AttentionBlock, FeedForward, FeedForwardLayout, ModelAdapter, NoFeedForwardError
from edgeprune.models.bert import BertAdapter
from edgeprune.models.distilbert import DistilBertAdapter
from edgeprune.models.llama import LlamaAdapter
from edgeprune.models.mha import MultiheadAttentionAdapter
from edgeprune.models.vit import ViTAdapter
from edgeprune.registry import Registry

ADAPTERS: Registry[type[ModelAdapter]] = Registry("model family")
ADAPTERS.register("bert")(BertAdapter)
ADAPTERS.register("distilbert")(DistilBertAdapter)
ADAPTERS.register("mha")(MultiheadAttentionAdapter)
ADAPTERS.register("vit")(ViTAdapter)
ADAPTERS.register("llama")(LlamaAdapter)


def adapter_for(model: nn.Module) -> ModelAdapter:
    for name in ADAPTERS:
        adapter_cls = ADAPTERS.get(name)
        if adapter_cls.matches(model):
            return adapter_cls()
    raise UserInputError(
        f"{type(model).__name__} is not a supported architecture; supported families: "
        f"{', '.join(ADAPTERS.names())}. Add one by subclassing edgeprune.models.ModelAdapter "
        "and registering it in edgeprune.models.ADAPTERS"
    )


__all__ = ["ADAPTERS", "AttentionBlock", "FeedForward", "FeedForwardLayout", "ModelAdapter", "NoFeedForwardError",
           "adapter_for"]
