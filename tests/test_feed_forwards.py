"""FFN-neuron removal through each adapter's `feed_forwards`, for every family: the listed parts compute what the
layer computes, removal equals zeroing the same neurons with exact parameter counts, mean folding equals the
model whose removed neurons output their mean, the config stays true, and the cut model saves and loads."""

import copy
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import edgeprune
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.base import INTERMEDIATE_SIZES_CONFIG_KEY, NoFeedForwardError
from edgeprune.models.structure import structure_of
from edgeprune.pruning.ffn import (
    ffn_layers,
    intermediate_sizes,
    neuron_parameter_count,
    neuron_statistics,
    remove_neurons,
    score_neurons,
    zero_neurons,
)

VOCAB = 120


def text_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(3, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def image_batch() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))}


def encoder_batch(batch_first: bool) -> dict[str, torch.Tensor]:
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(5))
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 5:] = True
    return {"src": x if batch_first else x.transpose(0, 1), "src_key_padding_mask": padding}


def bert(seed: int) -> nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    return BertModel(BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=32)).eval()


def roberta(seed: int) -> nn.Module:
    from transformers import RobertaConfig, RobertaModel

    torch.manual_seed(seed)
    return RobertaModel(RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=40, pad_token_id=1)).eval()


def distilbert(seed: int) -> nn.Module:
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(seed)
    return DistilBertModel(DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=3, n_heads=4, hidden_dim=64,
                                            max_position_embeddings=32)).eval()


def vit(seed: int) -> nn.Module:
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(seed)
    return ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
                              image_size=16, patch_size=8, num_channels=3)).eval()


def decoder(seed: int, family: str, **options: object) -> nn.Module:
    import transformers

    torch.manual_seed(seed)
    config_cls, model_cls = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
                             "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}[family]
    config = getattr(transformers, config_cls)(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                                               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                               max_position_embeddings=32, **options)
    return getattr(transformers, model_cls)(config).eval()


def mha_encoder(seed: int, batch_first: bool = True, nested: bool = False, **options: object) -> nn.Module:
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=batch_first, **options)
    model = nn.TransformerEncoder(layer, 3, enable_nested_tensor=nested)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # the encoder deep-copies one layer: make the layers differ
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model.eval()


def hidden(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    output = model(**batch)
    if isinstance(output, torch.Tensor):  # an nn.TransformerEncoder: padded positions are 0 on its nested-tensor
        padding = batch["src_key_padding_mask"]  # path and computed on the others, so they are left out
        return output.masked_fill((padding if output.shape[:2] == padding.shape else padding.T)[..., None], 0)
    return output.logits if hasattr(output, "logits") else output.last_hidden_state


@dataclass(frozen=True)
class Family:
    build: Callable[[int], nn.Module]
    batch: Callable[[], dict[str, torch.Tensor]]
    width: int  # dense FFN width of every layer
    per_neuron: int  # parameters one neuron owns
    width_config: str | None  # config attribute stating the FFN width (None: a plain module without config)


FAMILIES = {
    "bert": Family(bert, text_batch, 64, 32 + 1 + 32, "intermediate_size"),
    "roberta": Family(roberta, text_batch, 64, 32 + 1 + 32, "intermediate_size"),
    "distilbert": Family(distilbert, text_batch, 64, 32 + 1 + 32, "hidden_dim"),
    "vit": Family(vit, image_batch, 64, 32 + 1 + 32, "intermediate_size"),
    "llama-mlp-bias": Family(lambda seed: decoder(seed, "llama", mlp_bias=True), text_batch, 96,
                             2 * (64 + 1) + 64, "intermediate_size"),
    "qwen2": Family(lambda seed: decoder(seed, "qwen2"), text_batch, 96, 2 * 64 + 64, "intermediate_size"),
    "mha-encoder": Family(mha_encoder, lambda: encoder_batch(True), 64, 32 + 1 + 32, None),
    # eval padded batches run as NestedTensors through the layers, unless a hook context turns that off
    "mha-encoder-nested-tensor": Family(lambda seed: mha_encoder(seed, nested=True), lambda: encoder_batch(True), 64,
                                        32 + 1 + 32, None),
    "mha-encoder-sequence-first-gelu-no-bias": Family(
        lambda seed: mha_encoder(seed, batch_first=False, activation="gelu", bias=False),
        lambda: encoder_batch(False), 64, 32 + 32, None),
}


def removal(width: int) -> dict[int, list[int]]:
    return {0: [0, 5, width - 1], 2: list(range(0, width, 2))}  # widths width - 3, width, width / 2


def parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_listed_parts_compute_what_each_layer_feeds_its_output_projection(name):
    family = FAMILIES[name]
    model = family.build(0)
    adapter = adapter_for(model)
    blocks = adapter.feed_forwards(model)
    assert len(blocks) == len(adapter.layer_modules(model)) == 3
    assert [block.width for block in blocks] == [family.width] * 3
    inputs: dict[int, torch.Tensor] = {}
    activations: dict[int, torch.Tensor] = {}

    def capture(layer: int, values: torch.Tensor) -> torch.Tensor:
        activations[layer] = values
        return values

    handles = [block.inputs[0].register_forward_pre_hook(
        lambda _module, args, layer=layer: inputs.__setitem__(layer, args[0])) for layer, block in enumerate(blocks)]
    try:
        with torch.no_grad(), adapter.feed_forward_hook(model, capture):
            hidden(model, family.batch())
    finally:
        for handle in handles:
            handle.remove()
    assert sorted(activations) == sorted(inputs) == [0, 1, 2]
    with torch.no_grad():
        for layer, block in enumerate(blocks):
            torch.testing.assert_close(block.activations(inputs[layer]), activations[layer])


@pytest.mark.parametrize("name", list(FAMILIES))
def test_removing_neurons_equals_zeroing_them_with_exact_parameter_counts(name):
    family = FAMILIES[name]
    model = family.build(0)
    remove = removal(family.width)
    reference = zero_neurons(copy.deepcopy(model), remove)
    before = parameters(model)
    assert neuron_parameter_count(model, 0) == family.per_neuron
    remove_neurons(model, remove)
    widths = [family.width - 3, family.width, family.width // 2]
    assert intermediate_sizes(model) == widths
    assert parameters(model) == before - sum(len(v) for v in remove.values()) * family.per_neuron
    for block, width in zip(ffn_layers(model), widths, strict=True):
        assert all(linear.weight.shape[0] == linear.out_features == width for linear in block.inputs)
        assert block.output.weight.shape[1] == width
        if block.width_attribute is not None:
            assert getattr(block.owner, block.width_attribute) == width
    batch = family.batch()
    with torch.no_grad():
        torch.testing.assert_close(hidden(model, batch), hidden(reference, batch))
    config = getattr(model, "config", None)
    if family.width_config is None:
        assert config is None
        return
    # widths differ: the widest in the family's own attribute, each layer's in the record
    assert getattr(config, family.width_config) == family.width
    assert getattr(config, INTERMEDIATE_SIZES_CONFIG_KEY) == widths
    if family.width_config != "intermediate_size":
        assert "intermediate_size" not in config.to_dict()
    remove_neurons(model, {0: list(range(family.width // 2 - 3)), 1: list(range(family.width // 2))})
    assert intermediate_sizes(model) == [family.width // 2] * 3
    assert getattr(config, family.width_config) == family.width // 2
    assert not hasattr(config, INTERMEDIATE_SIZES_CONFIG_KEY)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_folding_means_equals_the_model_whose_removed_neurons_output_their_mean(name):
    family = FAMILIES[name]
    model = family.build(0)
    batch = family.batch()
    statistics = neuron_statistics(model, [batch])
    assert [tuple(m.shape) for m in statistics.means] == [(family.width,)] * 3
    assert all(float(m.abs().sum()) > 0 for m in statistics.means)  # the hooks saw every layer
    remove = removal(family.width)
    reference = copy.deepcopy(model)

    def replace(layer: int, values: torch.Tensor) -> torch.Tensor:
        if layer not in remove:
            return values
        values = values.clone()
        values[..., remove[layer]] = statistics.means[layer][remove[layer]].to(values.dtype)
        return values

    with torch.no_grad(), adapter_for(reference).feed_forward_hook(reference, replace):
        expected = hidden(reference, batch)
    remove_neurons(model, remove, means=statistics.means)
    blocks = ffn_layers(model)
    assert all(blocks[layer].output.bias is not None for layer in remove)
    with torch.no_grad():
        torch.testing.assert_close(hidden(model, batch), expected, rtol=1e-4, atol=1e-5)
        plain = hidden(remove_neurons(family.build(0), remove), batch)
    assert not torch.allclose(plain, expected, atol=1e-4)  # folding is what makes them equal


@pytest.mark.parametrize("name", list(FAMILIES))
def test_activation_scores_run_on_each_familys_inputs(name):
    family = FAMILIES[name]
    model = family.build(0)
    scores = score_neurons(model, [family.batch()], "activation")
    assert [s.shape for s in scores] == [(family.width,)] * 3 and all((s >= 0).all() for s in scores)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_cut_with_folded_means_saves_and_loads(name, tmp_path):
    family = FAMILIES[name]
    model = family.build(0)
    remove_neurons(model, removal(family.width), means=neuron_statistics(model, [family.batch()]).means)
    edgeprune.save(model, tmp_path / "saved")
    again = edgeprune.load(tmp_path / "saved", model=family.build(1))
    assert structure_of(again) == structure_of(model)
    assert structure_of(again).ffn_widths == [family.width - 3, family.width, family.width // 2]
    assert parameters(again) == parameters(model)
    batch = family.batch()
    with torch.no_grad():
        torch.testing.assert_close(hidden(again, batch), hidden(model, batch))


class BareAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.attention(x, x, x, need_weights=False)[0]


def test_a_model_without_feed_forwards_is_refused_in_one_line():
    model = BareAttention()
    for call in (lambda: intermediate_sizes(model), lambda: remove_neurons(model, {0: [0]}),
                 lambda: score_neurons(model)):
        with pytest.raises(NoFeedForwardError) as error:
            call()
        assert isinstance(error.value, UserInputError) and "\n" not in str(error.value)
        assert "layer 0 (MultiheadAttention) has no feed-forward block where the mha adapter looks" in str(error.value)
    assert structure_of(model).ffn_widths is None


def test_a_layer_whose_mlp_is_not_a_gated_mlp_is_named():
    model = decoder(0, "llama")
    model.model.layers[1].mlp = nn.Identity()
    with pytest.raises(NoFeedForwardError, match=r"layer 1 \(LlamaDecoderLayer\) has no feed-forward block where "
                                                 r"the llama adapter looks \(mlp.gate_proj, mlp.up_proj"):
        intermediate_sizes(model)


def test_the_dense_width_survives_save_and_load_by_either_route(tmp_path):
    model = bert(0)
    remove_neurons(model, {layer: list(range(32)) for layer in range(3)})  # equal widths: the config says 32
    assert model.config.intermediate_size == 32 and structure_of(model).ffn_dense_widths == [64] * 3
    edgeprune.save(model, tmp_path / "saved")
    for again in (edgeprune.load(tmp_path / "saved"), edgeprune.load(tmp_path / "saved", model=bert(1))):
        assert structure_of(again) == structure_of(model)
        assert again.config.intermediate_size == 32 and intermediate_sizes(again) == [32] * 3
        with torch.no_grad():
            torch.testing.assert_close(hidden(again, text_batch()), hidden(model, text_batch()))


def test_a_fresh_module_of_another_dense_ffn_width_is_a_one_line_error(tmp_path):
    model = remove_neurons(mha_encoder(0), {1: [0, 1]})
    edgeprune.save(model, tmp_path / "saved")
    fresh = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 96, dropout=0.0, batch_first=True), 3,
                                  enable_nested_tensor=False)
    with pytest.raises(UserInputError, match=r"layer 1's FFN was cut to 62 neurons from 64, but the given module's "
                                             r"has 96; pass a fresh, unpruned module") as error:
        edgeprune.load(tmp_path / "saved", model=fresh)
    assert "\n" not in str(error.value)
