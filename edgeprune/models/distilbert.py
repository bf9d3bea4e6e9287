"""DistilBERT: one attention module per block with q_lin/k_lin/v_lin/out_lin linears.

Its forward reshapes by `attention_head_size`, so only `n_heads` changes; `dim` stays the hidden size
the block maps to and from. The FFN is `ffn.lin1`, `ffn.activation`, `ffn.lin2`; its width is the config's
`hidden_dim`.
"""

from torch import nn

from edgeprune.models.base import ADAPTERS, FeedForwardLayout
from edgeprune.models.separate_projections import ProjectionLayout, SeparateProjectionsAdapter


@ADAPTERS.register("distilbert")
class DistilBertAdapter(SeparateProjectionsAdapter):
    family = "distilbert"
    remote_layout = dict(attention="attention", query="attention.q_lin", key="attention.k_lin", value="attention.v_lin",
                         output="attention.out_lin", head_size="attention_head_size", head_count=("n_heads",),
                         ffn_inputs=("ffn.lin1",), ffn_output="ffn.lin2")
    layout = ProjectionLayout(
        attention="attention", query="attention.q_lin", key="attention.k_lin", value="attention.v_lin",
        output="attention.out_lin", heads_attr="n_heads", size_attr="attention_head_size",
        dense_heads_config="n_heads",
    )
    ffn_layout = FeedForwardLayout(inputs=("ffn.lin1",), activation="ffn.activation", output="ffn.lin2", owner="ffn")
    ffn_width_config = "hidden_dim"

    @staticmethod
    def is_layer(module: nn.Module) -> bool:
        attention = getattr(module, "attention", None)
        return (
            attention is not None
            and all(isinstance(getattr(attention, n, None), nn.Linear) for n in ("q_lin", "k_lin", "v_lin", "out_lin"))
            and hasattr(attention, "n_heads")
            and hasattr(attention, "attention_head_size")
        )

    def remove_layers(self, model: nn.Module, layers: list[int]) -> None:
        super().remove_layers(model, layers)
        for module in model.modules():  # the encoder (`Transformer`) keeps its own layer count
            if isinstance(getattr(module, "layer", None), nn.ModuleList) and hasattr(module, "n_layers"):
                module.n_layers = len(module.layer)
