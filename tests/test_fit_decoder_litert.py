"""A grouped-query decoder fitted for LiteRT through the CLI, as a user runs it: the shipped `model.tflite` is a
KV-cached generator (prefill and decode signatures), timed decoding per candidate and held to the decode budget,
benchmarked as a generator, described by model.json, and its USAGE.md generates as written."""

import json
import subprocess
import sys

import pytest

from tests.test_fit_decoder import fit_tiny_gqa


@pytest.fixture(scope="module")
def litert_fit(tmp_path_factory):
    return fit_tiny_gqa(tmp_path_factory.mktemp("gqa-fit-litert"), "--runtime", "litert")


def test_a_gqa_decoder_fits_for_litert_and_ships_a_generator(litert_fit):
    code, result, out = litert_fit
    assert code == 0, result["message"]
    assert (out / "model.tflite").exists() and not (out / "model.pte").exists()
    assert result["fitted"]["recipe"]["runtime"] == "litert" and result["fitted"]["file_bytes"] <= 7.925e6
    generation = json.loads((out / "generation.json").read_text())
    assert generation["context"] == 64 and generation["decode"] and generation["ttft_ms"] > 0
    assert generation["artifact"] == "model.tflite" and result["generation"] == generation
    check = next(c for c in result["fitted"]["checks"] if c["kind"] == "decode")
    assert check["passed"] and abs(check["value"] - 1e3 / result["fitted"]["benchmark"]["decode_p50_ms"]) < 1e-6
    assert result["fitted"]["teacher_agreement"]["prompts"] >= 1


def test_model_json_and_usage_md_generate_the_programs_tokens(litert_fit):
    from transformers import AutoTokenizer

    from edgeprune.export.manifest import ModelManifest
    from edgeprune.export.usage import EXAMPLE_PROMPT, NEW_TOKENS, USAGE_NAME
    from edgeprune.generation.runner import Generator

    _, result, out = litert_fit
    manifest = ModelManifest.load(out / "model.json")
    kept = result["fitted"]["plan"]["heads"]["kept_heads"]
    per_token = 2 * sum(len(layer) // 4 for layer in kept) * 4 * 4  # K and V × KV heads kept × head_dim 4 × fp32
    assert manifest.runtime.name == "litert" and manifest.generator.attention == "portable"
    assert manifest.generator.kv_bytes_per_token == per_token and manifest.generator.kv_cache_bytes == per_token * 64
    program = (out / USAGE_NAME).read_text().split("```python\n", 1)[1].split("```", 1)[0]
    assert 'get_signature_runner("decode")' in program
    completed = subprocess.run([sys.executable, "-c", program], cwd=out, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    printed = json.loads(completed.stdout.strip().splitlines()[-1])
    prompt = AutoTokenizer.from_pretrained(out)(EXAMPLE_PROMPT, add_special_tokens=False)["input_ids"]
    assert printed["tokens"] == Generator(out / "model.tflite").generate(prompt, NEW_TOKENS)
