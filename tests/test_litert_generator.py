"""A decoder as a LiteRT generator: `prefill` and `decode` signatures with the KV cache as explicit state, sized per
layer from the pruned weights. The shipped `.tflite` generates the PyTorch model's greedy tokens (through a prompt
longer than one prefill chunk and up to the cache's last slot), keeps the generator's facts in the flatbuffer
through quantization, is timed call by call as fit times it, and `edgeprune generate` runs and benchmarks it."""

import json

import numpy as np
import pytest
import torch

from edgeprune.cli import main
from edgeprune.errors import UserInputError
from edgeprune.export import export, load_artifact
from edgeprune.export.litert_generator import METADATA_NAME, read_metadata, with_metadata
from edgeprune.export.manifest import inspect_artifact
from edgeprune.generation import CacheLayout
from edgeprune.generation.runner import Generator, greedy_reference
from tests.test_generation import CONTEXT, PREFILL, tiny_decoder

EXAMPLE = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    folder = tmp_path_factory.mktemp("litert-generator")
    model = tiny_decoder()
    artifacts = {recipe: export(model, EXAMPLE, folder / f"{recipe}.tflite", recipe, verify_on=[EXAMPLE])
                 for recipe in ("litert-fp32", "litert-int8")}
    return model, artifacts


def test_the_file_has_prefill_and_decode_signatures_with_a_cache_sized_per_layer(shipped):
    from ai_edge_litert.interpreter import Interpreter

    model, artifacts = shipped
    interpreter = Interpreter(str(artifacts["litert-fp32"].path))
    signatures = interpreter.get_signature_list()
    assert set(signatures) == {"prefill", "decode"}
    layout = CacheLayout.of(model.model, CONTEXT)
    assert layout.kv_heads == (1, 2, 2)  # a whole KV group out of layer 0
    for name in ("prefill", "decode"):
        details = interpreter.get_signature_runner(name).get_input_details()
        assert details["input_ids"]["shape"].tolist() == [1, PREFILL if name == "prefill" else 1]
        for layer, heads in enumerate(layout.kv_heads):
            for kind in ("k", "v"):
                assert details[f"{kind}_cache_{layer}"]["shape"].tolist() == [1, heads, CONTEXT, 4]
        # the call's own keys and values come out, not the whole cache
        assert sorted(signatures[name]["outputs"]) == sorted(["logits", *(n.replace("_cache_", "_new_")
                                                                          for n in details if "_cache_" in n)])
        outputs = interpreter.get_signature_runner(name).get_output_details()
        length = PREFILL if name == "prefill" else 1
        for layer, heads in enumerate(layout.kv_heads):
            assert outputs[f"k_new_{layer}"]["shape"].tolist() == [1, heads, length, 4]


@pytest.mark.parametrize("recipe", ["litert-fp32", "litert-int8"])
def test_the_generator_facts_survive_quantization_and_match_the_cache(shipped, recipe):
    model, artifacts = shipped
    facts = inspect_artifact(artifacts[recipe].path).generator
    layout = CacheLayout.of(model.model, CONTEXT)
    assert (facts.context, facts.max_seq_len, facts.attention) == (CONTEXT, PREFILL, "portable")
    assert facts.kv_cache_bytes == layout.total_bytes and facts.kv_bytes_per_token == layout.bytes_per_token
    assert (facts.eos_ids, facts.bos_id, facts.vocab_size) == ([2], 1, 30522)
    assert artifacts[recipe].verification.min_cosine >= artifacts[recipe].verification.tolerance_cosine


@pytest.mark.parametrize("recipe", ["litert-fp32", "litert-int8"])
def test_it_generates_the_pytorch_models_greedy_tokens_to_the_end_of_the_cache(shipped, recipe):
    """A 20-token prompt takes two prefill chunks (16 + a padded 4); the last chunk that cannot be padded inside the
    cache, and every token after it, goes through `decode`."""
    model, artifacts = shipped
    generator = Generator(artifacts[recipe].path)
    prompt = torch.randint(3, 96, (20,), generator=torch.Generator().manual_seed(2)).tolist()
    tokens = generator.generate(prompt, CONTEXT - len(prompt), stop_at_eos=False)
    assert len(tokens) == CONTEXT - len(prompt)
    assert tokens == greedy_reference(model, prompt, len(tokens))
    # a prompt that ends within a prefill's length of the cache's end: decoded token by token, same logits
    long_prompt = (prompt * 3)[:CONTEXT - 4]
    with torch.no_grad():
        expected = model(torch.tensor([long_prompt]))[0][0]
    logits = generator.forward(long_prompt, 0)
    assert torch.nn.functional.cosine_similarity(logits, expected, dim=-1).min() > 0.999


def test_metadata_is_replaced_not_duplicated(shipped):
    _, artifacts = shipped
    data = artifacts["litert-fp32"].path.read_bytes()
    rewritten = with_metadata(data, METADATA_NAME, json.dumps({"use_kv_cache": True, "x": 1}).encode())
    assert read_metadata(rewritten) == {"use_kv_cache": True, "x": 1}
    assert read_metadata(with_metadata(data, "other", b"{}")) == read_metadata(data)
    assert read_metadata(data, "missing") == {}


def test_a_calibrated_recipe_is_refused_for_a_generator(tmp_path):
    refusal = "litert-int8-static calibrates a single forward and cannot quantize a KV-cached generator"
    with pytest.raises(UserInputError, match=refusal):
        export(tiny_decoder(), EXAMPLE, tmp_path / "model.tflite", "litert-int8-static", calibration=[EXAMPLE])
    assert not (tmp_path / "model.tflite").exists()


def test_the_device_benchmark_runner_times_the_signature_each_call_makes(shipped):
    """bench/runner.py runs on boards without edgeprune: a one-token call is a `decode` step on the cache in the
    interpreter's first subgraph, a longer one a padded `prefill`; the two give the program's own logits for those
    tokens from an empty cache, call after call."""
    from ai_edge_litert.interpreter import Interpreter

    from edgeprune.bench.runner import generator_call

    _, artifacts = shipped
    path = artifacts["litert-fp32"].path
    interpreter = Interpreter(str(path))
    decode = generator_call(interpreter, [np.array([[5]]), np.array([0])])
    first = decode()
    assert first.shape == (1, 30522) and np.array_equal(decode(), first)
    prefill = generator_call(interpreter, [np.array([[5, 6, 7]]), np.arange(3)])
    logits = prefill()
    assert logits.shape == (PREFILL, 30522) and np.array_equal(prefill(), logits)
    assert np.allclose(first[0], logits[0], atol=1e-4)
    first = first[0]
    assert np.allclose(first, load_artifact(path)(torch.tensor([[5]]), torch.tensor([0]))[0][0, 0].numpy(), atol=1e-4)


def test_edgeprune_generate_continues_and_benchmarks_a_tflite(shipped, tmp_path, capsys):
    from transformers import BertTokenizerFast

    model, artifacts = shipped
    vocab = {f"w{i}": i for i in range(30522)}
    BertTokenizerFast(vocab=vocab, unk_token="w0", pad_token="w0").save_pretrained(tmp_path / "tokenizer")
    path = artifacts["litert-int8"].path
    code = main(["generate", str(path), "--prompt", "w5 w6 w7", "--max-new-tokens", "8", "--tokenizer",
                 str(tmp_path / "tokenizer"), "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert code == 0 and printed["tokens"] == Generator(path).generate([5, 6, 7], 8)
    code = main(["generate", str(path), "--bench", "--prompt-tokens", "8", "--depths", "0,16", "--min-seconds",
                 "0.05", "--threads", "1", "--out", str(tmp_path / "bench"), "--json"])
    bench = json.loads(capsys.readouterr().out)
    assert code == 0 and bench["context"] == CONTEXT and bench["prompt_tokens"] == 8
    assert [d["depth"] for d in bench["decode"]] == [0, 16] and bench["ttft_ms"] > 0
    assert bench["kv_cache_bytes"] == CacheLayout.of(model.model, CONTEXT).total_bytes
    assert (tmp_path / "bench" / "generation.json").exists()


def test_a_device_generates_with_the_generator_module_as_the_python_runtime_does(shipped, tmp_path, capsys):
    """On a device the .tflite is run by edgeprune/bench/litert_generate.py under the device's Python (numpy and
    ai-edge-litert only), through the transport (here the local one), with the native runner's command line and log."""
    from transformers import BertTokenizerFast

    _, artifacts = shipped
    path = artifacts["litert-int8"].path
    BertTokenizerFast(vocab={f"w{i}": i for i in range(30522)}, unk_token="w0",
                      pad_token="w0").save_pretrained(tmp_path / "tokenizer")
    words = " ".join(f"w{i}" for i in range(3, 23))  # 20 tokens: two prefill chunks
    command = ["generate", str(path), "--prompt", words, "--max-new-tokens", "24", "--tokenizer",
               str(tmp_path / "tokenizer"), "--json"]
    assert main(command) == 0
    here = json.loads(capsys.readouterr().out)
    assert main([*command, "--device", "host", "--threads", "1"]) == 0
    there = json.loads(capsys.readouterr().out)
    assert there["tokens"] == here["tokens"] and len(here["tokens"]) == 24
    code = main(["generate", str(path), "--bench", "--device", "host", "--depths", "0,20", "--runs", "2",
                 "--threads", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["prompt_tokens"] == PREFILL and result["prefill_runs"] == 2
    assert [d["depth"] for d in result["decode"]] == [1, 20]
    assert [d["tokens"] for d in result["decode"]] == [2 * (CONTEXT - 2), 2 * (CONTEXT - 21)]  # to the context's end
    assert result["peak_rss_mb"] > 0 and result["kv_cache_bytes"] == inspect_artifact(path).generator.kv_cache_bytes


def test_the_device_generator_refuses_a_program_that_is_not_a_generator(tmp_path):
    import importlib.util
    import subprocess
    import sys

    from edgeprune.runtimes import RUNTIMES

    plain = tmp_path / "plain.tflite"
    export(torch.nn.Linear(4, 2).eval(), (torch.ones(1, 4),), plain, "litert-fp32")
    np.asarray([1, 2], dtype="<i8").tofile(tmp_path / "prompt.bin")
    script = importlib.util.find_spec(RUNTIMES.get("litert").device_generator).origin
    done = subprocess.run([sys.executable, script, f"--model_path={plain}", f"--prompt={tmp_path / 'prompt.bin'}",
                           "--generate=2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "is not a KV-cached generator" in done.stderr


@pytest.mark.parametrize("heads,kv_heads,length", [(8, 2, 5), (3, 1, 1), (4, 4, 3)])
def test_grouped_attention_equals_the_eager_attention_it_replaces(heads, kv_heads, length):
    """The cache is read per KV head, never repeated per query head, with the values of transformers' eager path."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    from edgeprune.generation.grouped_attention import grouped_attention

    generator = torch.Generator().manual_seed(heads + length)
    query = torch.randn(1, heads, length, 8, generator=generator)
    key, value = (torch.randn(1, kv_heads, 12, 8, generator=generator) for _ in range(2))
    mask = torch.where(torch.rand(1, 1, length, 12, generator=generator) > 0.3, 0.0, -1e9)
    module = torch.nn.Module()
    module.num_key_value_groups, module.training = heads // kv_heads, False
    expected, _ = eager_attention_forward(module, query, key, value, mask, scaling=8 ** -0.5)
    got, _ = grouped_attention(module, query, key, value, mask, scaling=8 ** -0.5)
    assert got.shape == expected.shape == (1, length, heads, 8)
    assert torch.allclose(got, expected, atol=1e-6)


@pytest.mark.parametrize("recipe", ["litert-fp32", "litert-int8", "fp32"])
def test_a_tied_output_layer_is_sized_as_the_runtime_stores_it(tmp_path, recipe):
    """A decoder whose output layer is its embedding table (SmolLM2, Llama 3.2): LiteRT's converter stores the table
    once, ExecuTorch twice; the size model says so (before, it predicted a litert-fp32 SmolLM2 at 651 MB for 540)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from edgeprune.models.classifier import CausalLMLogits
    from edgeprune.quantize import RECIPES
    from edgeprune.quantize.size_model import ParameterLayout, payload_bytes

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32768, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    model = CausalLMLogits(LlamaForCausalLM(config).eval(), CONTEXT).eval()
    layout = ParameterLayout.of(model)
    assert layout.tied_output
    table = 32768 * 64 * (1 if recipe == "litert-int8" else 4)  # the table's bytes in the recipe's format
    predicted = payload_bytes(layout, RECIPES.get(recipe))
    path = tmp_path / f"model{'.pte' if recipe == 'fp32' else '.tflite'}"
    size = export(model, (torch.arange(PREFILL)[None] + 3, torch.arange(PREFILL)), path, recipe).size_bytes
    # within the file's overhead (graph, signatures, quantization parameters: what the size model learns per recipe
    # from real files), under half the second copy of the table that counting it twice would add
    assert abs(size - predicted) < table / 2


def test_the_cache_starts_at_zero_whatever_the_interpreters_memory_held(shipped):
    """The cache is the decode signature's own input tensors, which the interpreter does not clear: a masked slot
    still meets a zero attention weight, so NaN left there would reach every logit."""
    from ai_edge_litert.interpreter import Interpreter

    from edgeprune.bench.litert_generate import CachedGenerator
    from edgeprune.export.litert_generator import read_metadata_at

    _, artifacts = shipped
    path = artifacts["litert-fp32"].path
    interpreter = Interpreter(str(path))
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        if "_cache_" in detail["name"]:
            interpreter.tensor(detail["index"])()[...] = np.nan
    generator = CachedGenerator(interpreter, read_metadata_at(path))
    prompt = [5, 6, 7]
    logits = np.concatenate([generator.logits(prompt, 0), generator.logits([8], 3)])
    expected = load_artifact(path)(torch.tensor([prompt + [8]]), torch.arange(4))[0][0].numpy()
    assert np.isfinite(logits).all() and np.allclose(logits, expected, atol=1e-4)


def test_a_generator_whose_decode_is_not_the_first_subgraph_is_refused(tmp_path):
    """A file converted prefill first (edgeprune before 2026-12-06) would have its decode steps write into the
    prefill signature's tensors; it is refused in one line, by the loader and by the device benchmark runner."""
    import litert_torch
    from ai_edge_litert.interpreter import Interpreter

    from edgeprune.bench.litert_generate import CachedGenerator
    from edgeprune.bench.runner import generator_call
    from edgeprune.export.litert_generator import SignatureGenerator, empty_caches

    model = tiny_decoder().model.eval()  # the Hugging Face model inside the CausalLMLogits wrapper
    layout = CacheLayout.of(model, CONTEXT)
    generator = SignatureGenerator(model, CONTEXT).eval().requires_grad_(False)
    ids = EXAMPLE[0]
    with torch.no_grad():
        converter = litert_torch.signature("prefill", generator, sample_kwargs={
            "input_ids": ids, "input_pos": torch.arange(PREFILL), **empty_caches(layout)})
        converter.signature("decode", generator, sample_kwargs={
            "input_ids": ids[:, :1], "input_pos": torch.tensor([0]), **empty_caches(layout)}
        ).convert().export(str(tmp_path / "old.tflite"))
    facts = {"get_max_seq_len": PREFILL, "get_max_context_len": CONTEXT}
    with pytest.raises(ValueError, match="not the interpreter's first subgraph"):
        CachedGenerator(Interpreter(str(tmp_path / "old.tflite")), facts)
    with pytest.raises(ValueError, match="not the interpreter's first subgraph"):
        generator_call(Interpreter(str(tmp_path / "old.tflite")), [np.array([[5]]), np.array([0])])
