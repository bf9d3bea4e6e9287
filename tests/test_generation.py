"""KV-cached generators: the cached forward equals the full-sequence one, the shipped program generates the
PyTorch model's greedy tokens, its cache is sized per layer from the pruned weights (KV bytes fall exactly with
the KV heads removed), and `edgeprune generate` runs and benchmarks it as a user types it."""

import json

import pytest
import torch

from edgeprune.cli import main
from edgeprune.errors import UserInputError
from edgeprune.export import export, load_artifact
from edgeprune.generation import CacheLayout
from edgeprune.generation.bench import benchmark_generation
from edgeprune.generation.runner import (
    Generator,
    TeacherContinuations,
    greedy_cached,
    greedy_reference,
    next_token_agreement,
    teacher_agreement,
)
from edgeprune.models import adapter_for
from edgeprune.models.classifier import CausalLMLogits

CONTEXT, PREFILL = 48, 16


def tiny_decoder(seed: int = 0) -> torch.nn.Module:
    """8 query heads over 2 KV heads, 3 layers, then pruned unevenly: one whole KV group out of layer 0, one query
    head per group out of layer 2."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=4, max_position_embeddings=64,
                         attn_implementation="eager", bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).eval()
    adapter = adapter_for(model)
    adapter.remove_heads(model, 0, [0, 1, 2, 3])
    adapter.remove_heads(model, 2, [0, 4])
    return CausalLMLogits(model, CONTEXT).eval()


@pytest.fixture(scope="module")
def shipped(tmp_path_factory, session_exports):
    model = tiny_decoder()
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    path = tmp_path_factory.mktemp("generator") / "model.pte"
    artifact = export(model, example, path, "fp32", session_exports, verify_on=[example])
    return model, artifact


@torch.no_grad()
def test_cached_prefill_and_decode_equal_the_full_forward():
    model = tiny_decoder()
    ids = torch.randint(3, 96, (1, 20), generator=torch.Generator().manual_seed(1))
    full = model(ids)[0]
    steps = [model(ids[:, :12], torch.arange(12))[0]]
    steps += [model(ids[:, t:t + 1], torch.tensor([t]))[0] for t in range(12, 20)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    # a new sequence starts again at 0 over the old one's slots (masked, never cleared)
    assert torch.allclose(model(ids[:, :5], torch.arange(5))[0], full[:, :5], atol=1e-5)


def test_the_cache_is_sized_per_layer_and_shrinks_exactly_with_kv_heads():
    model = tiny_decoder()
    layout = CacheLayout.of(model.model, CONTEXT)
    assert layout.kv_heads == (1, 2, 2) and layout.head_dim == (4, 4, 4)
    dense_bytes = 2 * 3 * 2 * 4 * 4 * CONTEXT  # 2 (K and V) × layers × KV heads × head_dim × fp32 × slots
    assert layout.total_bytes == dense_bytes * 5 // 6  # one KV head of six removed
    model(torch.tensor([[3, 4]]), torch.arange(2))
    assert sum(b.numel() * b.element_size() for b in model.kv_cache.buffers()) == layout.total_bytes


def test_the_export_cache_tells_contexts_apart():
    from edgeprune.export import content_key

    model = tiny_decoder()
    example = (torch.arange(PREFILL)[None] + 3, torch.arange(PREFILL))
    longer = CausalLMLogits(model.model, CONTEXT * 2)
    assert content_key(model, "fp32", example) != content_key(longer, "fp32", example)
    assert content_key(model, "fp32", example) == content_key(tiny_decoder(), "fp32", example)


def test_the_program_carries_the_llm_runner_metadata(shipped):
    _, artifact = shipped
    constants = load_artifact(artifact.path).constants()
    assert constants["use_kv_cache"] is True and constants["enable_dynamic_shape"] is True
    assert constants["get_max_seq_len"] == PREFILL and constants["get_max_context_len"] == CONTEXT
    assert constants["get_bos_id"] == 1 and constants["get_eos_ids"] == 2 and constants["get_vocab_size"] == 30522
    assert constants["get_kv_cache_bytes"] == CacheLayout.of(shipped[0].model, CONTEXT).total_bytes
    assert artifact.verification.passed


def test_the_program_generates_the_pytorch_models_greedy_tokens(shipped):
    model, artifact = shipped
    generator = Generator(artifact.path)
    prompt = [5, 17, 33, 8, 61, 12, 40, 9, 70, 21, 3, 55, 14, 90, 6, 28, 44, 19, 7]  # longer than one prefill chunk
    tokens = generator.generate(prompt, 20, stop_at_eos=False)
    assert tokens == greedy_reference(model, prompt, 20)
    assert next_token_agreement(tokens, tokens) == 1.0
    with pytest.raises(Exception, match="context of 48"):
        generator.forward(list(range(3, 50)), 5)


def test_the_teachers_continuations_are_computed_once_for_every_program_compared(shipped):
    model, artifact = shipped
    forwards = [0]
    blocks = torch.randint(3, 1000, (3, 12), generator=torch.Generator().manual_seed(1))
    reference = TeacherContinuations(model)
    handle = model.model.register_forward_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    try:
        first = teacher_agreement(Generator(artifact.path), reference, blocks, prompts=2, prompt_tokens=8,
                                  new_tokens=6)
        assert forwards == [2 * 6]  # per prompt: the prompt, then one token at a time through the cache
        second = teacher_agreement(Generator(artifact.path), reference, blocks, prompts=2, prompt_tokens=8,
                                   new_tokens=6)
    finally:
        handle.remove()
    assert forwards == [2 * 6] and first == second
    assert first.agreement == 1.0  # the fp32 program generates the model's own greedy tokens
    for block in blocks:  # the teacher's cache gives its full-sequence forward's tokens
        assert reference(block[:8].tolist(), 6) == greedy_reference(model, block[:8].tolist(), 6)
    assert greedy_cached(model, [5, 17, 33], 20) == greedy_reference(model, [5, 17, 33], 20)


def test_generation_benchmark_measures_every_figure(shipped):
    _, artifact = shipped
    result = benchmark_generation(artifact.path, threads=1, prompt_tokens=100, depths=(0, 40, 4096),
                                  min_seconds=0.05)
    assert result.prompt_tokens == PREFILL  # cut to the program's prefill length
    assert [d.depth for d in result.decode] == [0, 40]  # 4096 does not fit a context of 48
    assert all(d.tokens >= 16 and d.tokens_per_s > 0 for d in result.decode)
    assert result.ttft_ms > 0 and result.prefill_runs >= 3 and result.load_ms > 0
    assert result.kv_cache_bytes == CacheLayout.of(shipped[0].model, CONTEXT).total_bytes
    assert result.peak_rss_mb >= result.added_rss_mb >= 0


def test_the_measuring_process_runs_one_openmp_thread(shipped, monkeypatch):
    """ExecuTorch's custom_sdpa calls MKL from its pool's workers; their OpenMP teams spun on the cores the program
    decodes on (SmolLM2 at 2 threads: 44-61 tokens/s against 183). The measuring process runs with one, whatever
    the caller's environment says, and the result says so."""
    _, artifact = shipped
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    result = benchmark_generation(artifact.path, threads=2, prompt_tokens=8, depths=(0,), min_seconds=0.05)
    assert result.openmp_threads == "1" and result.threads == 2
    assert ("threads", "2 (OpenMP 1)") in result.rows()


def test_the_measured_peak_is_the_measuring_processs_not_its_parents(shipped):
    """ru_maxrss survives fork and exec: measured from fit's process (gigabytes) it reported fit's peak."""
    _, artifact = shipped
    ballast = torch.ones(700_000_000 // 4 * 4)  # 2.8 GB resident in this process
    result = benchmark_generation(artifact.path, threads=1, prompt_tokens=8, depths=(0,), min_seconds=0.05)
    assert float(ballast[-1]) == 1.0 and 0 < result.peak_rss_mb < 2000


def test_generate_cli_continues_and_benchmarks(shipped, tmp_path, capsys):
    _, artifact = shipped
    from tests._byo import copy_tokenizer

    copy_tokenizer(artifact.path.parent)
    code = main(["generate", str(artifact.path), "--prompt", "the bank", "--max-new-tokens", "4", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and len(printed["tokens"]) <= 4 and printed["prompt_tokens"]
    code = main(["generate", str(artifact.path), "--bench", "--depths", "0", "--min-seconds", "0.05", "--threads",
                 "1", "--out", str(tmp_path / "bench")])
    assert code == 0 and "time to first token" in capsys.readouterr().out
    assert json.loads((tmp_path / "bench" / "generation.json").read_text())["context"] == CONTEXT


def test_a_tokenizer_of_another_model_is_one_line(shipped, tmp_path):
    _, artifact = shipped
    with pytest.raises(UserInputError, match="outside the generator's vocabulary of 30522"):
        Generator(artifact.path).generate([40000], 2)


@pytest.mark.parametrize("args,expected", [
    (["--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1"),
    (["--bench", "--depths", "a,b"], "--depths takes whole numbers"),
    ([], "give --prompt TEXT"),
])
def test_generate_cli_bad_input_is_one_line(shipped, args, expected, capsys):
    _, artifact = shipped
    assert main(["generate", str(artifact.path), *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_a_plain_program_is_not_a_generator(tmp_path, capsys):
    model = CausalLMLogits(tiny_decoder().model).eval()
    path = tmp_path / "plain.pte"
    export(model, (torch.arange(8)[None] + 3,), path, "fp32")
    assert main(["generate", str(path), "--bench"]) == 4
    assert "not a KV-cached generator" in capsys.readouterr().err
