"""Every adapter family saves and loads again after real pruning: heads removed unevenly across layers, a layer
removed, FFN widths cut unevenly (every family with feed-forward blocks). Loaded two ways: rebuilt by `load`
alone (transformers models) and cut from a fresh, unpruned module passed as `model=` (every family). Outputs,
parameter counts and the structure record must equal those of the pruned model. A removal a family does not
support is named in the test id and asserted to be refused, not skipped."""

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import edgeprune
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.classifier import EncoderClassifier, EncoderEmbedder, ImageClassifier
from edgeprune.models.structure import structure_of
from edgeprune.pruning.ffn import intermediate_sizes, remove_neurons

VOCAB = 200


def _bert(seed: int, pooler: bool = True) -> nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    return BertModel(config, add_pooling_layer=pooler).eval()


def _roberta(seed: int) -> nn.Module:
    from transformers import RobertaConfig, RobertaModel

    torch.manual_seed(seed)
    config = RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=70, pad_token_id=1)
    return RobertaModel(config).eval()


def _distilbert(seed: int) -> nn.Module:
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(seed)
    config = DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=4, n_heads=4, hidden_dim=64,
                              max_position_embeddings=64)
    return DistilBertModel(config).eval()


def _vit(seed: int, pooler: bool = True) -> nn.Module:
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(seed)
    config = ViTConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                       image_size=16, patch_size=8, num_channels=3)
    return ViTModel(config, add_pooling_layer=pooler).eval()


def _decoder(seed: int, family: str) -> nn.Module:
    import transformers

    torch.manual_seed(seed)
    config_cls, model_cls = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
                             "qwen2": ("Qwen2Config", "Qwen2ForCausalLM")}[family]
    config = getattr(transformers, config_cls)(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                                               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                               max_position_embeddings=64)
    return getattr(transformers, model_cls)(config).eval()


def _mha_encoder(seed: int) -> nn.Module:
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # the encoder deep-copies one layer: make the layers differ
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return model.eval()


class BareAttention(nn.Module):
    """Two nn.MultiheadAttention modules outside any encoder layer (no biases), so no layer can be removed."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.first = nn.MultiheadAttention(32, 4, bias=False, batch_first=True)
        self.second = nn.MultiheadAttention(32, 4, bias=False, batch_first=True)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.first(x, x, x, need_weights=False)[0]
        return x + self.second(x, x, x, need_weights=False)[0]


def _token_inputs(low: int = 0) -> dict[str, torch.Tensor]:
    ids = torch.randint(low, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _encoder_outputs(model: nn.Module, **inputs: torch.Tensor) -> list[torch.Tensor]:
    output = model(**inputs)
    pooled = getattr(output, "pooler_output", None)
    return [output.last_hidden_state] + ([] if pooled is None else [pooled])


@dataclass(frozen=True)
class Family:
    build: Callable[[int], nn.Module]
    run: Callable[[nn.Module], list[torch.Tensor]]
    heads: dict[int, list[int]]  # dense heads removed per layer (before the layer removal)
    layers: list[int] | None  # layers removed afterwards; None: the family cannot remove these layers
    ffn: dict[int, list[int]] | None  # FFN neurons removed (after the layer removal); None: the model has no FFN
    transformers: bool = True  # load can rebuild it from its config alone
    ffn_width: int = 64  # dense FFN width of every layer


HEADS = {0: [0], 1: [1, 2], 2: [3], 3: [0, 1, 3]}  # 4 layers of 4 heads: 3, 2, 3, 1 remain
GQA_HEADS = {0: [2, 3], 2: [1, 3], 3: [0, 1, 2]}  # a whole KV group; one per group; a group and one more
FFN = {0: list(range(10)), 2: [5, 7, 63]}  # widths 54, 64, 61 of the 3 layers left
GQA_FFN = {1: list(range(0, 96, 3)), 2: [0, 95]}


def _text(model: nn.Module) -> list[torch.Tensor]:
    return _encoder_outputs(model, **_token_inputs())


def _roberta_run(model: nn.Module) -> list[torch.Tensor]:
    return _encoder_outputs(model, **_token_inputs(low=3))  # ids 0..2 are specials (1 pads)


def _image(model: nn.Module) -> list[torch.Tensor]:
    return _encoder_outputs(model, pixel_values=torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4)))


def _logits(model: nn.Module) -> list[torch.Tensor]:
    return [model(**_token_inputs()).logits]


def _mha_run(model: nn.Module) -> list[torch.Tensor]:
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(5))
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 5:] = True
    return [model(x, src_key_padding_mask=padding)]


def _bare_run(model: nn.Module) -> list[torch.Tensor]:
    return [model(torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(6)))]


FAMILIES = {
    "bert-pooler": Family(_bert, _text, HEADS, [1], FFN),
    "bert-no-pooler": Family(lambda seed: _bert(seed, pooler=False), _text, HEADS, [1], FFN),
    "roberta": Family(_roberta, _roberta_run, HEADS, [1], FFN),
    "distilbert": Family(_distilbert, _text, HEADS, [1], FFN),
    "vit-pooler": Family(_vit, _image, HEADS, [1], FFN),
    "vit-no-pooler": Family(lambda seed: _vit(seed, pooler=False), _image, HEADS, [1], FFN),
    "llama-gqa": Family(lambda seed: _decoder(seed, "llama"), _logits, GQA_HEADS, [1], GQA_FFN, ffn_width=96),
    "qwen2-gqa": Family(lambda seed: _decoder(seed, "qwen2"), _logits, GQA_HEADS, [1], GQA_FFN, ffn_width=96),
    "mha-encoder": Family(_mha_encoder, _mha_run, HEADS, [1], FFN, transformers=False),
    "mha-bare(no-ffn-and-layers-unsupported)": Family(BareAttention, _bare_run, {0: [1], 1: [0, 2, 3]}, None, None,
                                                   transformers=False),
}


def _prune(family: Family) -> nn.Module:
    model = edgeprune.prune_heads(family.build(0), family.heads)
    adapter = adapter_for(model)
    if family.layers is None:
        with pytest.raises(ValueError, match="only whole encoder layers can be removed"):
            adapter.remove_layers(model, [0])
    else:
        adapter.remove_layers(model, family.layers)
    if family.ffn is None:
        with pytest.raises(UserInputError, match="has no feed-forward block where the mha adapter looks"):
            remove_neurons(model, {0: [0]})
    else:
        remove_neurons(model, family.ffn)
        assert intermediate_sizes(model) == [family.ffn_width - len(family.ffn.get(i, [])) for i in range(3)]
    return model


def _parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _assert_same(again: nn.Module, model: nn.Module, family: Family) -> None:
    assert structure_of(again) == structure_of(model)
    assert _parameters(again) == _parameters(model)
    with torch.no_grad():
        expected, actual = family.run(model), family.run(again)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_rebuilt_by_load_alone(name, tmp_path):
    family = FAMILIES[name]
    model = _prune(family)
    assert [b.num_heads for b in adapter_for(model).attention_blocks(model)] != [4] * len(family.heads)
    edgeprune.save(model, tmp_path / "saved")
    if not family.transformers:
        with pytest.raises(UserInputError, match=r"plain nn.Module.*model=\.\.\."):
            edgeprune.load(tmp_path / "saved")
        return
    _assert_same(edgeprune.load(tmp_path / "saved"), model, family)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_cut_from_a_fresh_module(name, tmp_path):
    family = FAMILIES[name]
    model = _prune(family)
    edgeprune.save(model, tmp_path / "saved")
    fresh = family.build(1)  # other random weights: every value must come from the folder
    again = edgeprune.load(tmp_path / "saved", model=fresh)
    assert again is fresh
    _assert_same(again, model, family)


@pytest.mark.parametrize("name", ["bert-no-pooler", "distilbert", "llama-gqa", "mha-encoder"])
def test_saving_a_loaded_model_again_keeps_the_record_of_removed_layers(name, tmp_path):
    family = FAMILIES[name]
    model = _prune(family)
    edgeprune.save(model, tmp_path / "first")
    loaded = edgeprune.load(tmp_path / "first", model=family.build(1))
    edgeprune.save(loaded, tmp_path / "second")
    _assert_same(edgeprune.load(tmp_path / "second", model=family.build(2)), model, family)


def _classifier(seed: int) -> EncoderClassifier:
    torch.manual_seed(seed + 100)
    return EncoderClassifier(_bert(seed, pooler=False), nn.Linear(32, 5)).eval()


WRAPPED = {
    "encoder-classifier": (_classifier, lambda m: list(m(**_token_inputs()))),
    "encoder-embedder": (lambda seed: EncoderEmbedder(_bert(seed), pooling="max", normalize=True).eval(),
                         lambda m: list(m(**_token_inputs()))),
    "image-classifier": (lambda seed: ImageClassifier(_vit(seed, pooler=False), nn.Linear(32, 3, bias=False)).eval(),
                         lambda m: list(m(torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))))),
}


@pytest.mark.parametrize("route", ["rebuilt", "fresh"])
@pytest.mark.parametrize("name", list(WRAPPED))
def test_edgeprune_wrappers_round_trip_with_their_heads(name, route, tmp_path):
    build, run = WRAPPED[name]
    model = edgeprune.prune_heads(build(0), HEADS)
    remove_neurons(model, {3: [0, 1, 2]})
    edgeprune.save(model, tmp_path / "saved")
    again = edgeprune.load(tmp_path / "saved", model=build(1) if route == "fresh" else None)
    assert type(again) is type(model)
    assert structure_of(again) == structure_of(model) and _parameters(again) == _parameters(model)
    with torch.no_grad():
        for a, e in zip(run(again), run(model), strict=True):
            torch.testing.assert_close(a, e)


def test_bias_compensation_of_heads_and_neurons_round_trips(tmp_path):
    """Folding removed heads' and neurons' means adds biases Llama's config cannot express (o_proj, down_proj)."""
    from edgeprune.pruning.ffn import neuron_statistics

    model = _decoder(0, "llama")
    batches = [_token_inputs()]
    edgeprune.prune_heads(model, {0: [2, 3]}, compensate=batches)
    remove_neurons(model, {1: [0, 1, 2]}, means=neuron_statistics(model, batches).means)
    layers = model.model.layers
    assert layers[0].self_attn.o_proj.bias is not None and layers[1].mlp.down_proj.bias is not None
    edgeprune.save(model, tmp_path / "saved")
    family = FAMILIES["llama-gqa"]
    for again in (edgeprune.load(tmp_path / "saved"), edgeprune.load(tmp_path / "saved", model=_decoder(1, "llama"))):
        _assert_same(again, model, family)
