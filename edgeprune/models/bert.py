"""BERT-like encoders (BERT, MiniLM, RoBERTa): `layer.attention.self.{query,key,value}` and
`layer.attention.output.dense`. transformers 5 reshapes with `view(..., -1, head_size)`, so sliced
projections run as they are once `num_attention_heads` and `all_head_size` are updated. The FFN is
`layer.intermediate.dense`, its activation, then `layer.output.dense`."""

from torch import nn

from edgeprune.models.base import ADAPTERS, FeedForwardLayout
from edgeprune.models.separate_projections import ProjectionLayout, SeparateProjectionsAdapter


@ADAPTERS.register("bert")
class BertAdapter(SeparateProjectionsAdapter):
    family = "bert"
    remote_layout = dict(attention="attention.self", query="attention.self.query", key="attention.self.key",
                         value="attention.self.value", output="attention.output.dense",
                         head_size="attention_head_size", head_count=("num_attention_heads",),
                         head_width=("all_head_size",), ffn_inputs=("intermediate.dense",), ffn_output="output.dense")
    layout = ProjectionLayout(
        attention="attention.self", query="attention.self.query", key="attention.self.key",
        value="attention.self.value", output="attention.output.dense",
        heads_attr="num_attention_heads", size_attr="attention_head_size",
    )
    ffn_layout = FeedForwardLayout(inputs=("intermediate.dense",), activation="intermediate.intermediate_act_fn",
                                   output="output.dense")

    @staticmethod
    def is_layer(module: nn.Module) -> bool:
        attention = getattr(module, "attention", None)
        self_attention = getattr(attention, "self", None)
        return (
            self_attention is not None
            and all(isinstance(getattr(self_attention, n, None), nn.Linear) for n in ("query", "key", "value"))
            and isinstance(getattr(getattr(attention, "output", None), "dense", None), nn.Linear)
            and hasattr(self_attention, "num_attention_heads")
            and hasattr(self_attention, "attention_head_size")
        )

    def _set_head_count(self, layer: nn.Module, heads: int) -> None:
        super()._set_head_count(layer, heads)
        attention = self._attention(layer)
        attention.all_head_size = heads * attention.attention_head_size
