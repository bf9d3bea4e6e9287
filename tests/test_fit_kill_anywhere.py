"""Fault injection: a real fit of a tiny BERT through the real ExecuTorch runtime, killed with SIGKILL at seeded random
moments across its stages (and a resume of it killed again), then resumed to the end. After every kill no output
folder that looks complete exists, and the final result equals that of an uninterrupted run in everything that does
not depend on timing. Ctrl-C ends a fit with exit 130, one line and the partial kept (the chains show that
partials resume)."""

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeprune.search.journal import work_dir_for
from tests.conftest import small_vocab_tokenizer_files, tiny_bert

pytestmark = pytest.mark.integration

KILLS = 6  # seeded kills across the stages, each followed by a resume (which may be killed in turn)
EDGEPRUNE = [sys.executable, "-c", "from edgeprune.cli import main; raise SystemExit(main())"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The model and a cache shared by every run (exports and the teacher are reused, as they are for a user);
    the cache starts cold, so the first kills can land in real exports."""
    root = tmp_path_factory.mktemp("kill-anywhere")
    model = root / "model"
    model.mkdir()
    vocab = small_vocab_tokenizer_files(model, words=500)
    tiny_bert(seed=1, vocab_size=vocab, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=64, max_position_embeddings=64).save_pretrained(model)
    env = {**os.environ, "EDGEPRUNE_CACHE": str(root / "cache"), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    flags = ["fit", "--recover-steps", "0",
             "--task", "minilm-bbc", "--model", str(model), "--max-length", "32", "--max-mb", "0.13",
             "--recipe", "int8", "--ffn-fractions", "0", "--layer-removals", "0", "--no-trim-vocab",
             "--scoring-examples", "16"]
    return {"root": root, "env": env, "flags": flags}


def reference(setup: dict) -> dict:
    """The uninterrupted run's timing-free result (run once, on the same cache)."""
    if "reference" not in setup:
        out = setup["root"] / "reference"
        done = subprocess.run([*EDGEPRUNE, *setup["flags"], "--out", str(out)], env=setup["env"], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        setup["reference"] = timing_free(out)
    return setup["reference"]


def timing_free(out: Path) -> dict:
    """What a fit decided and produced, without the figures that depend on timing."""
    result = json.loads((out / "result.json").read_text())

    def artifact(a: dict) -> dict:
        return {k: a[k] for k in ("recipe", "plan", "file_bytes", "validation_quality", "quality", "ffn_fraction",
                                  "layers_removed", "parameters", "vocabulary_size")}

    return {
        "status": result["status"], "fitted": artifact(result["fitted"]), "dense": artifact(result["dense"]),
        "candidates": sorted(json.dumps(artifact(c), sort_keys=True) for c in result["candidates"]),
        "trials": [(t["recipe"], t["heads_removed"], t["ffn_fraction"], t["file_bytes"], t["fits"])
                   for t in result["trials"]],
        "shipped": result["shipped_files"], "head_scores": without_seconds(result["head_scores"]),
        "model": hashlib.sha256((out / result["fitted"]["path"]).read_bytes()).hexdigest(),
    }


def without_seconds(value):  # noqa: ANN001, ANN201 - JSON
    """The head scores without the scoring trials' timings (0.0 s on one run, 0.1 s on another)."""
    if isinstance(value, dict):
        return {k: without_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [without_seconds(v) for v in value]
    return value


def run_until_line(argv: list[str], env: dict, line: int, delay: float) -> tuple[bool, subprocess.CompletedProcess]:
    """Start the CLI; SIGKILL it `delay` seconds after its `line`-th progress line. Returns (killed, process)."""
    process = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    seen, tail = 0, []
    for text in process.stderr:
        tail = [*tail[-20:], text]
        seen += text.startswith("[")
        if seen >= line:
            time.sleep(delay)
            break
    else:  # it ended before that line
        process.wait(timeout=60)
    killed = process.poll() is None
    if killed:
        process.send_signal(signal.SIGKILL)
    process.stderr.close()
    process.wait(timeout=60)
    process.tail = "".join(tail)
    return killed, process


def finished(out: Path) -> bool:
    """A kill can land after the fit renamed its work folder into place (while it prints its summary)."""
    return (out / "result.json").is_file() and not work_dir_for(out).exists()


def test_a_fit_killed_anywhere_resumes_to_the_same_result(setup):
    """Chains of sessions: a fresh fit killed after a random number of its progress lines, its resume killed the
    same way, and so on, until the last resume completes; a chain that completes early starts another."""
    rng = random.Random(20261130)
    kills, results, sessions = 0, [], 0
    while kills < KILLS:
        out = setup["root"] / f"chain-{len(results)}"
        argv = [*EDGEPRUNE, *setup["flags"], "--out", str(out)]
        while True:
            sessions += 1
            assert sessions <= 4 * KILLS, f"only {kills} kills landed in {sessions} sessions"
            final = kills >= KILLS
            line = 10**6 if final else rng.randint(1, 30) if "--out" in argv else rng.randint(4, 14)
            killed, process = run_until_line(argv, setup["env"], line, rng.uniform(0, 0.5))
            if not killed:
                assert process.returncode == 0, f"session {sessions} exited {process.returncode}: {process.tail}"
                break
            kills += 1
            if finished(out):
                break
            assert not out.exists() or not any(out.iterdir()), f"{out} looks complete after kill {kills}"
            argv = [*EDGEPRUNE, *setup["flags"], "--resume", str(out)]
        assert finished(out)
        results.append(timing_free(out))
        assert json.loads((out / "result.json").read_text())["elapsed_s"] > 0
    expected = reference(setup)
    for chain, result in enumerate(results):
        differ = sorted(key for key in expected if result[key] != expected[key])
        assert not differ, f"chain {chain} differs from the uninterrupted run in {differ}: " + "; ".join(
            f"{key}: {result[key]} != {expected[key]}" for key in differ)[:3000]


def test_ctrl_c_exits_130_with_one_line_and_keeps_the_partial(setup):
    out = setup["root"] / "interrupted"
    process = subprocess.Popen([*EDGEPRUNE, *setup["flags"], "--out", str(out)], env=setup["env"],
                               stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    seen, lines = 0, []
    for text in process.stderr:
        lines.append(text)
        seen += text.startswith("[")
        if "benchmarking" in text:  # past the baseline: there is finished work to keep
            process.send_signal(signal.SIGINT)
            break
    lines += process.stderr.read().splitlines(keepends=True)
    assert process.wait(timeout=60) == 130
    after = [line for line in lines[lines.index(text) + 1:] if line.strip()]
    assert not any("Traceback" in line for line in lines)
    assert "interrupted; the finished work is kept in" in after[-1]
    assert f"--resume {out}" in after[-1]
    assert work_dir_for(out).is_dir() and not out.exists()
    records = [json.loads(line) for line in (work_dir_for(out) / "journal.jsonl").read_text().splitlines()]
    assert any("scores" in r for r in records) and records[-1]["stopped"] == "interrupted"  # scored before
