"""A KV-cached generator run by edgeprune's native ExecuTorch runner (`--generate`, compiled here from the
executorch wheel, as `devices setup` compiles it on a board): its greedy tokens are ExecuTorch's Python runtime's,
it stops at the program's EOS, and `edgeprune generate --device/--binary` continues a prompt and benchmarks through
a real transport with it."""

import json
import subprocess

import numpy as np
import pytest
import torch

from edgeprune.cli import main
from edgeprune.devices.native_tools import build_here
from edgeprune.export import export
from edgeprune.generation.native import parse_generation
from edgeprune.generation.runner import Generator
from tests.test_generation import CONTEXT, PREFILL, tiny_decoder

PROMPT = [5, 17, 33, 8, 61, 12, 40, 9, 70, 21, 3, 55, 14, 90, 6, 28, 44, 19, 7]  # longer than one prefill chunk


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    return build_here(tmp_path_factory.mktemp("runner") / "executor_runner").path


def export_generator(folder, exports, eos: int = 2):
    """The tiny decoder's program, through the session's export cache: its key names the end-of-text id, so the
    program of another id is another entry (tests/test_export_cache_key.py)."""
    model = tiny_decoder()
    model.model.config.eos_token_id = eos
    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    return export(model, example, folder / "model.pte", "fp32", exports, verify_on=[example]).path


@pytest.fixture(scope="module")
def generator(tmp_path_factory, session_exports):
    return export_generator(tmp_path_factory.mktemp("generator"), session_exports)


def run_runner(runner, pte, prompt, tmp_path, *flags):
    prompt_file = tmp_path / "prompt.bin"
    np.asarray(prompt, dtype="<i8").tofile(prompt_file)
    return subprocess.run([runner, f"--model_path={pte}", f"--prompt={prompt_file}", *flags], capture_output=True,
                          text=True)


def test_the_runner_generates_the_python_runtimes_greedy_tokens(runner, generator, tmp_path):
    expected = Generator(generator).generate(PROMPT, 20, stop_at_eos=False)
    done = run_runner(runner, generator, PROMPT, tmp_path, "--generate=20", "--ignore_eos", "--num_executions=2")
    assert done.returncode == 0, done.stderr
    parsed = parse_generation(done.stdout + done.stderr)
    assert parsed.tokens == expected
    assert [(r.prompt_tokens, r.decode_steps) for r in parsed.runs] == [(19, 19), (19, 19)]
    assert all(r.prefill_ms > 0 and r.decode_ms > 0 for r in parsed.runs) and parsed.load_ms > 0
    assert 0 < parsed.peak_rss_mb < 100  # the runner's process: no interpreter, no torch
    # asked for more than the context holds: as many as fit after the prompt
    done = run_runner(runner, generator, PROMPT, tmp_path, "--generate=500", "--ignore_eos")
    assert len(parse_generation(done.stderr + done.stdout).tokens) == CONTEXT - len(PROMPT)


def test_the_runner_stops_at_the_programs_eos(runner, generator, tmp_path, session_exports):
    first = Generator(generator).generate(PROMPT, 8, stop_at_eos=False)
    pte = export_generator(tmp_path, session_exports, eos=first[3])  # the same weights; the 4th new token is now EOS
    expected = first[:first.index(first[3]) + 1]
    done = run_runner(runner, pte, PROMPT, tmp_path, "--generate=8")
    assert done.returncode == 0, done.stderr
    assert parse_generation(done.stdout + done.stderr).tokens == expected
    assert Generator(pte).generate(PROMPT, 8) == expected


def test_the_runner_refuses_what_it_cannot_generate(runner, generator, tmp_path):
    done = run_runner(runner, generator, list(range(3, 3 + CONTEXT)), tmp_path, "--generate=4")
    assert done.returncode == 1 and f"leave no room in the context of {CONTEXT}" in done.stderr
    done = subprocess.run([runner, f"--model_path={generator}", "--generate=4"], capture_output=True, text=True)
    assert done.returncode == 1 and "--generate=N and --prompt=ids.bin go together" in done.stderr
    (tmp_path / "odd.bin").write_bytes(b"\x01\x02\x03")
    done = subprocess.run([runner, f"--model_path={generator}", "--generate=4", f"--prompt={tmp_path / 'odd.bin'}"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "has 3 bytes: expected int64 token ids" in done.stderr


def test_generate_on_a_device_continues_as_the_python_runtime_does(runner, generator, tmp_path, capsys):
    from tests._byo import copy_tokenizer

    copy_tokenizer(generator.parent)
    command = ["generate", str(generator), "--prompt", "the bank said", "--max-new-tokens", "12", "--json"]
    assert main(command) == 0
    here = json.loads(capsys.readouterr().out)
    assert main([*command, "--device", "host", "--binary", runner, "--threads", "1"]) == 0
    there = json.loads(capsys.readouterr().out)
    assert there["tokens"] == here["tokens"] and there["text"] == here["text"] and len(here["tokens"]) >= 1


def test_generate_bench_on_a_device_times_every_figure(runner, generator, tmp_path, capsys):
    code = main(["generate", str(generator), "--bench", "--device", "host", "--binary", runner, "--depths",
                 "0,20,4096", "--runs", "2", "--threads", "1", "--out", str(tmp_path / "bench"), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert result["prompt_tokens"] == PREFILL and result["prefill_runs"] == 2 and result["ttft_ms"] > 0
    # depth 0 decodes after one token (a step needs one in the cache); 4096 does not fit a context of 48
    assert [d["depth"] for d in result["decode"]] == [1, 20]
    assert [d["tokens"] for d in result["decode"]] == [2 * (CONTEXT - 2), 2 * (CONTEXT - 21)]  # to the context's end
    assert result["kv_cache_bytes"] == Generator(generator).run.constants()["get_kv_cache_bytes"]
    assert 0 < result["peak_rss_mb"] == result["added_rss_mb"] < 100
    assert json.loads((tmp_path / "bench" / "generation.json").read_text())["context"] == CONTEXT


def test_generate_on_a_device_without_a_runner_is_one_line(generator, tmp_path, capsys):
    profile = tmp_path / "board.toml"
    profile.write_text('name = "board"\ndescription = "a board"\n[hardware]\narch = "aarch64"\ncores = 2\n'
                       'ram_mb = 1024\n[runtime]\nname = "executorch"\nthreads = 2\n[budgets]\n'
                       '[connection]\nkind = "ssh"\nhost = "127.0.0.1"\nuser = "pi"\n')
    assert main(["generate", str(generator), "--bench", "--device", str(profile)]) == 2
    err = capsys.readouterr().err
    assert "device board has no native executorch runner to generate with" in err and len(err.splitlines()) == 1


def test_parse_generation_reads_the_log_and_refuses_another():
    log = ("Model loaded in 3.5 ms.\nGenerator: prefill chunk 16, context 48\n"
           "Generation 1 of 2: prefill 19 tokens in 1.5 ms, decode 3 tokens in 4.25 ms\n"
           "Generation 2 of 2: prefill 19 tokens in 1.0 ms, decode 3 tokens in 4.0 ms\n"
           "Tokens: 7 8 9 10\nPeak resident set: 2048 kB\n")
    parsed = parse_generation(log)
    assert parsed.tokens == [7, 8, 9, 10] and parsed.load_ms == 3.5 and parsed.peak_rss_mb == 2.0
    assert [r.decode_ms for r in parsed.runs] == [4.25, 4.0]
    with pytest.raises(ValueError, match="no `Generation"):
        parse_generation("Model loaded in 3.5 ms.\nModel executed successfully 1 time(s) in 2 ms.\n")


def test_a_decode_step_is_timed_by_the_runner_as_fit_times_it_on_a_native_device(runner, generator):
    """fit times every generator candidate on one token after its prompt: the raw one-token files of a program
    whose bound is the prefill length run as [1, 1] and [1] (the runner sizes the token dimension by the bytes)."""
    from edgeprune.bench import benchmark_on
    from edgeprune.devices.transports.local import LocalEndpoint, LocalTransport

    step = (torch.tensor([[7]]), torch.tensor([30]))
    with LocalTransport(LocalEndpoint()) as transport:
        result = benchmark_on(transport, generator, step, "executorch", 1, warmup=1, runs=5, native_binary=runner)
        prefill = benchmark_on(transport, generator, (torch.arange(PREFILL)[None] + 3, torch.arange(PREFILL)),
                               "executorch", 1, warmup=1, runs=5, native_binary=runner)
    assert result.runner == "executor_runner" and result.timed_runs == 5 and result.p50_ms > 0
    assert result.p50_ms < prefill.p50_ms  # one token, not the bound's sixteen
