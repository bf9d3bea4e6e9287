"""ViT-like image encoders (ViT, DeiT): `ViTLayer.attention` holds q_proj/k_proj/v_proj/o_proj, `ViTLayer.mlp`
holds fc1, activation_fn, fc2.

transformers 5 flattened ViT's attention and MLP; the 4.x layout (`attention.attention.query`,
`attention.output.dense`, `intermediate.dense`) is not what this adapter looks for.
"""

from torch import nn

from edgeprune.models.base import ADAPTERS, FeedForwardLayout
from edgeprune.models.separate_projections import ProjectionLayout, SeparateProjectionsAdapter

_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


@ADAPTERS.register("vit")
class ViTAdapter(SeparateProjectionsAdapter):
    family = "vit"
    remote_layout = dict(attention="attention", query="attention.q_proj", key="attention.k_proj",
                         value="attention.v_proj", output="attention.o_proj", head_size="head_dim",
                         head_count=("num_attention_heads",), ffn_inputs=("mlp.fc1",), ffn_output="mlp.fc2")
    layout = ProjectionLayout(
        attention="attention", query="attention.q_proj", key="attention.k_proj", value="attention.v_proj",
        output="attention.o_proj", heads_attr="num_attention_heads", size_attr="head_dim",
    )
    ffn_layout = FeedForwardLayout(inputs=("mlp.fc1",), activation="mlp.activation_fn", output="mlp.fc2", owner="mlp")

    @staticmethod
    def is_layer(module: nn.Module) -> bool:
        attention = getattr(module, "attention", None)
        if attention is None or not all(isinstance(getattr(attention, n, None), nn.Linear) for n in _PROJECTIONS):
            return False
        # attention variants with per-head tables (relative position bias, ...) would need those sliced too
        only_projections = all(name.split(".")[0] in _PROJECTIONS for name, _ in attention.named_parameters())
        return (
            only_projections
            and hasattr(attention, "num_attention_heads")
            and hasattr(attention, "head_dim")
            and attention.k_proj.out_features == attention.q_proj.out_features  # no grouped-query attention
            and isinstance(getattr(module, "layernorm_before", None), nn.LayerNorm)
            and isinstance(getattr(module, "layernorm_after", None), nn.LayerNorm)
        )
