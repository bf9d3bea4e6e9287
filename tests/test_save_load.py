"""A pruned model with a different head count in every layer saves and loads again, exactly."""

import pytest
import torch

import edgeprune
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from tests.conftest import tiny_bert


def test_round_trip_keeps_per_layer_heads_and_outputs(tmp_path):
    model = edgeprune.prune_heads(tiny_bert(), {0: [0], 1: [1, 2], 2: [0, 1, 3]})
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    assert [b.num_heads for b in adapter_for(again).attention_blocks(again)] == [3, 2, 1]
    assert [b.original_heads for b in adapter_for(again).attention_blocks(again)] == [(1, 2, 3), (0, 3), (2,)]
    assert sum(p.numel() for p in again.parameters()) == sum(p.numel() for p in model.parameters())
    ids = torch.randint(1000, 30522, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).last_hidden_state, model(input_ids=ids).last_hidden_state)


def test_dense_model_round_trips_too(tmp_path):
    edgeprune.save(tiny_bert(), tmp_path / "dense")
    assert sum(p.numel() for p in edgeprune.load(tmp_path / "dense").parameters()) == sum(
        p.numel() for p in tiny_bert().parameters())


def test_errors(tmp_path):
    with pytest.raises(UserInputError, match="no config.json"):
        edgeprune.load(tmp_path)
    with pytest.raises(UserInputError, match="is not a folder"):
        edgeprune.load(tmp_path / "absent")


def test_a_plain_module_saves_and_loads_into_a_fresh_one(tmp_path):
    torch.manual_seed(0)
    linear = torch.nn.Linear(2, 3)
    edgeprune.save(linear, tmp_path / "x")
    with pytest.raises(UserInputError, match=r"holds a Linear \(a plain nn.Module\); build a fresh"):
        edgeprune.load(tmp_path / "x")
    again = edgeprune.load(tmp_path / "x", model=torch.nn.Linear(2, 3))
    torch.testing.assert_close(again.weight, linear.weight)
    with pytest.raises(UserInputError, match=r"weights do not match the architecture \(2 of another shape; weight is "
                                             r"\[3, 2\] in the file but \[4, 2\] in the model\)$"):
        edgeprune.load(tmp_path / "x", model=torch.nn.Linear(2, 4))


def _tiny_llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def _parameters(model):
    return sum(p.numel() for p in model.parameters())


def _structure(model):
    from edgeprune.pruning.ffn import intermediate_sizes

    blocks = adapter_for(model).attention_blocks(model)
    return [(b.num_heads, b.num_kv_heads, b.original_heads) for b in blocks], intermediate_sizes(model)


def test_bert_with_uneven_heads_and_uneven_ffn_widths_round_trips(tmp_path):
    from edgeprune.pruning.ffn import INTERMEDIATE_SIZES_CONFIG_KEY, remove_neurons

    model = edgeprune.prune_heads(tiny_bert(), {0: [3], 2: [0, 2]})
    remove_neurons(model, {0: list(range(10)), 1: [5, 7, 63]})  # widths 54, 61, 64
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    assert _structure(again) == _structure(model)
    assert _structure(again)[1] == [54, 61, 64] and [h for h, _, _ in _structure(again)[0]] == [3, 4, 2]
    assert getattr(again.config, INTERMEDIATE_SIZES_CONFIG_KEY) == [54, 61, 64]
    assert _parameters(again) == _parameters(model)
    ids = torch.randint(1000, 30522, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   model(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_llama_with_uneven_gqa_heads_and_uneven_ffn_widths_round_trips(tmp_path):
    from edgeprune.pruning.ffn import remove_neurons

    # layer 0 loses a whole KV group, layer 2 one query head from each group
    model = edgeprune.prune_heads(_tiny_llama(), {0: [2, 3], 2: [1, 3]})
    remove_neurons(model, {1: list(range(0, 96, 3)), 2: [0, 95]})  # widths 96, 64, 94
    assert model.model.layers[1].mlp.intermediate_size == 64
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    assert _structure(again) == _structure(model)
    assert _structure(again)[1] == [96, 64, 94]
    assert [(h, kv) for h, kv, _ in _structure(again)[0]] == [(2, 1), (4, 2), (2, 2)]
    assert _parameters(again) == _parameters(model)
    ids = torch.randint(0, 128, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, model(input_ids=ids).logits)
        generated = again.generate(ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=4,
                                   min_new_tokens=4, do_sample=False)
        expected = model.generate(ids[:1], attention_mask=torch.ones_like(ids[:1]), max_new_tokens=4,
                                  min_new_tokens=4, do_sample=False)
    assert torch.equal(generated, expected)


def test_layer_removal_after_uneven_ffn_removal_saves_the_true_widths(tmp_path):
    from edgeprune.pruning.ffn import remove_neurons

    model = remove_neurons(_tiny_llama(), {0: [1, 2], 2: list(range(30))})  # widths 94, 96, 66
    adapter_for(model).remove_layers(model, [1])
    edgeprune.save(model, tmp_path / "short")
    again = edgeprune.load(tmp_path / "short")
    assert _structure(again)[1] == [94, 66] and len(again.model.layers) == 2
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids).logits, model(input_ids=ids).logits)


def test_a_record_of_ffn_widths_that_does_not_fit_is_a_clear_error(tmp_path):
    import json

    from edgeprune.pruning.ffn import INTERMEDIATE_SIZES_CONFIG_KEY, remove_neurons

    edgeprune.save(remove_neurons(tiny_bert(), {0: [1]}), tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config[INTERMEDIATE_SIZES_CONFIG_KEY] = [63, 64]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserInputError, match=r"config.json records FFN widths \[63, 64\] \(edgeprune_intermediate_"
                                             r"sizes\) but edgeprune.json \[63, 64, 64\]; the folder was edited"):
        edgeprune.load(tmp_path / "m")
    (tmp_path / "m" / "edgeprune.json").unlink()  # as an older edgeprune wrote it: the config is the only record
    with pytest.raises(UserInputError, match="does not fit a model of 3 layers"):
        edgeprune.load(tmp_path / "m")


@pytest.mark.parametrize("family", ["bert", "vit"])
def test_a_model_built_without_its_pooler_loads(family, tmp_path):
    from transformers import BertModel, ViTConfig, ViTModel

    from tests.conftest import tiny_bert_config

    torch.manual_seed(0)
    if family == "bert":
        model = BertModel(tiny_bert_config(), add_pooling_layer=False)
        inputs = {"input_ids": torch.randint(0, 999, (2, 6))}
    else:
        config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           image_size=16, patch_size=8)
        model = ViTModel(config, add_pooling_layer=False)
        inputs = {"pixel_values": torch.randn(2, 3, 16, 16)}
    model = edgeprune.prune_heads(model.eval(), {0: [1, 2]})
    edgeprune.save(model, tmp_path / "m")
    again = edgeprune.load(tmp_path / "m")
    assert again.pooler is None and _parameters(again) == _parameters(model)
    with torch.no_grad():
        torch.testing.assert_close(again(**inputs).last_hidden_state, model(**inputs).last_hidden_state)


def _pruned_encoder(heads=4, layers=3, dim_feedforward=32, seed=0):
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(16, heads, dim_feedforward, dropout=0.0, batch_first=True)
    return torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


@pytest.mark.parametrize(("fresh", "message"), [
    (lambda: tiny_bert(), r"is a mha model but the given module \(BertModel\) is a bert model"),
    (lambda: _pruned_encoder(heads=8), r"layer 0 of the given module has 8 heads, but .* pruned from 4; pass a fresh"),
    (lambda: edgeprune.prune_heads(_pruned_encoder(), {0: [0]}), r"layer 0 of the given module has 3 heads"),
    (lambda: _pruned_encoder(layers=4), r"layers of the given module has 4 layers; .* kept 2 of 3"),
    (lambda: _pruned_encoder(dim_feedforward=48), r"weights do not match the architecture \(\d+ of another shape"),
], ids=["other-family", "other-head-count", "already-pruned", "other-layer-count", "other-ffn-width"])
def test_a_fresh_module_that_does_not_match_is_a_one_line_error(fresh, message, tmp_path):
    model = edgeprune.prune_heads(_pruned_encoder(), {0: [1], 2: [0, 3]})
    adapter_for(model).remove_layers(model, [1])
    edgeprune.save(model, tmp_path / "m")
    with pytest.raises(UserInputError, match=message) as error:
        edgeprune.load(tmp_path / "m", model=fresh())
    assert "\n" not in str(error.value)


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path):
    path.write_bytes(b"\x00\x01not a safetensors file at all" * 10)


def _bad_json(path):
    path.write_text('{"architectures": ["BertModel"], ')


@pytest.mark.parametrize(("what", "damage", "message"), [
    ("transformers", ("model.safetensors", _truncate), "model.safetensors is not a readable safetensors file"),
    ("transformers", ("model.safetensors", _garbage), "model.safetensors is not a readable safetensors file"),
    ("transformers", ("config.json", _bad_json), r"config.json is not valid JSON \(Expecting"),
    ("transformers", ("edgeprune.json", _bad_json), r"edgeprune.json is not valid JSON \(Expecting"),
    ("module", ("model.safetensors", _truncate), "model.safetensors is not a readable safetensors file"),
    ("module", ("model.safetensors", lambda p: p.unlink()), r"has no model.safetensors"),
    ("wrapper", ("edgeprune_head.safetensors", _garbage), "edgeprune_head.safetensors is not a readable safetensors"),
], ids=["truncated", "garbage", "config-json", "manifest-json", "module-truncated", "module-missing", "head-garbage"])
def test_a_damaged_folder_is_a_one_line_error_naming_the_file(what, damage, message, tmp_path):
    from edgeprune.models.classifier import EncoderClassifier

    model = {"transformers": lambda: edgeprune.prune_heads(tiny_bert(), {0: [1]}),
             "module": lambda: edgeprune.prune_heads(_pruned_encoder(), {0: [1]}),
             "wrapper": lambda: EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 2))}[what]()
    edgeprune.save(model, tmp_path / "m")
    name, damage_fn = damage
    damage_fn(tmp_path / "m" / name)
    fresh = _pruned_encoder() if what == "module" else None
    with pytest.raises(UserInputError, match=message) as error:
        edgeprune.load(tmp_path / "m", model=fresh)
    assert "\n" not in str(error.value) and str(tmp_path / "m") in str(error.value)


def test_only_non_persistent_buffers_are_tolerated_in_the_file(tmp_path):
    from safetensors.torch import load_file, save_file

    model = tiny_bert()
    edgeprune.save(model, tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    state = load_file(weights)
    # what transformers 4 checkpoints (the bundled MiniLM among them) still carry
    state["embeddings.position_ids"] = torch.arange(64)[None]
    state["embeddings.token_type_ids"] = torch.zeros(1, 64, dtype=torch.long)
    save_file(state, weights)
    assert _parameters(edgeprune.load(tmp_path / "m")) == _parameters(model)
    save_file({**state, "embeddings.extra": torch.zeros(3)}, weights)
    with pytest.raises(UserInputError, match=r"unexpected \['embeddings.extra'\]"):
        edgeprune.load(tmp_path / "m")


def test_a_folder_without_the_edgeprune_record_loads_from_its_config(tmp_path):
    from edgeprune.pruning.ffn import remove_neurons

    model = remove_neurons(edgeprune.prune_heads(tiny_bert(), {0: [3], 2: [0, 2]}), {1: [5, 7]})
    edgeprune.save(model, tmp_path / "m")
    (tmp_path / "m" / "edgeprune.json").unlink()  # as an older edgeprune wrote it
    again = edgeprune.load(tmp_path / "m")
    assert _structure(again) == _structure(model) and _parameters(again) == _parameters(model)


def _minilm_inputs():
    ids = torch.randint(1000, 20000, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    return ids, mask


@pytest.mark.integration
def test_the_bundled_minilm_loads_as_transformers_loads_it():
    from transformers import BertModel

    from edgeprune.tasks import minilm_model_path

    loaded = edgeprune.load(minilm_model_path())
    reference = BertModel.from_pretrained(minilm_model_path(), dtype=torch.float32).eval()
    assert _parameters(loaded) == _parameters(reference)
    ids, mask = _minilm_inputs()
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   reference(input_ids=ids, attention_mask=mask).last_hidden_state)


@pytest.mark.integration
def test_the_pruned_bundled_classifier_and_its_encoder_round_trip(tmp_path):
    from edgeprune.models.classifier import EncoderClassifier
    from edgeprune.tasks import bundled_task

    encoder = bundled_task("minilm-bbc").load_encoder()  # the teacher's encoder: no pooler
    torch.manual_seed(0)
    teacher = EncoderClassifier(encoder, torch.nn.Linear(384, 5)).eval()
    kept = [list(range(12)), [0, 3, 5], list(range(1, 12)), [7], list(range(0, 12, 2)), [1, 2, 3, 4]]
    pruned = edgeprune.apply_plan(teacher, edgeprune.PruningPlan([12] * 6, kept))
    edgeprune.save(pruned, tmp_path / "classifier")
    edgeprune.save(pruned.encoder, tmp_path / "encoder")
    again = edgeprune.load(tmp_path / "classifier")
    encoder_again = edgeprune.load(tmp_path / "encoder")
    assert isinstance(again, EncoderClassifier) and encoder_again.pooler is None
    assert _parameters(again) == _parameters(pruned)
    assert [list(b.original_heads) for b in adapter_for(again).attention_blocks(again)] == kept
    ids, mask = _minilm_inputs()
    with torch.no_grad():
        for actual, expected in zip(again(ids, mask), pruned(ids, mask), strict=True):
            torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(encoder_again(input_ids=ids, attention_mask=mask).last_hidden_state,
                                   pruned.encoder(input_ids=ids, attention_mask=mask).last_hidden_state)
