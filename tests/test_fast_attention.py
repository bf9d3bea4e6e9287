"""The fast attention path (ExecuTorch's `llama::update_cache` / `llama::custom_sdpa` kernels): the same logits as the
full-sequence forward and the portable path, on a decoder pruned to uneven query and KV heads per layer; a program
built on it says so in its metadata, loads through every loader of ours (the custom kernels are loaded for it),
generates the PyTorch model's greedy tokens and is told apart from the portable program by the export cache."""

import pytest
import torch

from edgeprune.bench.runner import executorch_bindings, load_forward
from edgeprune.cli import main
from edgeprune.errors import UserInputError
from edgeprune.export import content_key, export, load_artifact
from edgeprune.generation import CacheLayout, SdpaKVCache, cached_sdpa_forward
from edgeprune.generation.runner import Generator, greedy_reference
from edgeprune.models.classifier import CausalLMLogits
from edgeprune.tasks import make_task
from tests.test_generation import CONTEXT, PREFILL, tiny_decoder

IDS = torch.randint(3, 96, (1, 20), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def fast_program(tmp_path_factory):
    model = tiny_decoder()
    model.attention = "fast"
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    artifact = export(model, example, tmp_path_factory.mktemp("fast") / "model.pte", "fp32", verify_on=[example])
    return model, artifact


@torch.no_grad()
def test_the_kernels_equal_the_full_forward_in_pytorch():
    model = tiny_decoder()
    full = model(IDS)[0]
    cache = SdpaKVCache(CacheLayout.of(model.model, CONTEXT))
    assert cache.keys_0.shape == (1, CONTEXT, 1, 4) and cache.keys_2.shape == (1, CONTEXT, 2, 4)
    steps = [cached_sdpa_forward(model.model, cache, IDS[:, :12], torch.arange(12))]
    steps += [cached_sdpa_forward(model.model, cache, IDS[:, t:t + 1], torch.tensor([t])) for t in range(12, 20)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    # a new sequence over the old one's slots: the kernels attend only up to its own positions
    assert torch.allclose(cached_sdpa_forward(model.model, cache, IDS[:, :5], torch.arange(5)), full[:, :5], atol=1e-5)
    assert model.model.config._attn_implementation == "eager"  # the layers' own attention again after the call


def test_the_fast_program_equals_the_full_forward(fast_program):
    model, artifact = fast_program
    assert artifact.verification.passed and artifact.verification.max_abs_error < 1e-5
    run = load_artifact(artifact.path)
    constants = run.constants()
    assert constants["use_sdpa_with_kv_cache"] is True
    assert constants["get_kv_cache_bytes"] == CacheLayout.of(model.model, CONTEXT).total_bytes
    with torch.no_grad():
        full = model(IDS)[0]
    steps = [run(IDS[:, :12], torch.arange(12))[0]]
    steps += [run(IDS[:, t:t + 1], torch.tensor([t]))[0] for t in range(12, 20)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    # the benchmark runner's own loader (the one bench and fit time with) loads the kernels too
    forward = load_forward(executorch_bindings(), str(artifact.path))
    assert torch.allclose(forward([IDS[:, :12], torch.arange(12)])[0], full[:, :12], atol=1e-5)


def test_the_fast_program_generates_the_pytorch_models_greedy_tokens(fast_program):
    model, artifact = fast_program
    prompt = [5, 17, 33, 8, 61, 12, 40, 9, 70, 21, 3, 55, 14, 90, 6, 28, 44, 19, 7]
    assert Generator(artifact.path).generate(prompt, 20, stop_at_eos=False) == greedy_reference(model, prompt, 20)


def test_the_export_cache_tells_attention_paths_apart():
    example = (torch.arange(PREFILL)[None] + 3, torch.arange(PREFILL))
    portable = tiny_decoder()
    fast = CausalLMLogits(portable.model, CONTEXT, "fast")
    assert content_key(portable, "fp32", example) != content_key(fast, "fp32", example)


def test_an_unknown_attention_path_is_refused():
    with pytest.raises(ValueError, match="attention must be one of portable, fast"):
        CausalLMLogits(tiny_decoder().model, CONTEXT, "flash")


def test_attention_of_an_encoder_task_is_one_line(tmp_path, capsys):
    code = main(["export", "--task", "minilm-bbc", "--attention", "fast", "--out", str(tmp_path / "m.pte")])
    err = capsys.readouterr().err
    assert code == 2 and "--attention sets a causal-lm generator's KV cache; task minilm-bbc has none" in err
    assert err.count("\n") == 1


def test_a_causal_lm_task_resolves_auto_to_the_kernels_this_process_loads(tmp_path):
    from tests._byo import tiny_llama_dir
    from tests.test_fit_decoder import decoder_data

    model = tiny_llama_dir(tmp_path / "llama", heads=8, kv_heads=2)
    task = make_task("causal-lm", model, decoder_data(tmp_path), max_length=16)
    assert task.attention == "auto" and task.program_attention == "fast"
    assert task.teacher().model.attention == "fast" and task.describe()["attention"] == "fast"
    portable = make_task("causal-lm", model, decoder_data(tmp_path), max_length=16, attention="portable")
    assert portable.options_key() != task.options_key()
    with pytest.raises(UserInputError, match="--attention must be auto, portable or fast, got 'flash'"):
        make_task("causal-lm", model, decoder_data(tmp_path), max_length=16, attention="flash")
