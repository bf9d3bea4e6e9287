"""The ExecuTorch runner edgeprune builds from the executorch wheel's libraries (no torch, no Python at run
time), compiled and run on this host: what `devices setup` builds on an arm64 board, checked here against
ExecuTorch's own Python runtime on the same `.pte`."""

import json
import subprocess

import numpy as np
import pytest
import torch

from edgeprune.cli import main
from edgeprune.devices.native_tools import REQUIRED_BACKEND, build_here, parse_backends
from edgeprune.export import export
from edgeprune.models.classifier import EncoderClassifier
from tests.conftest import tiny_bert


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    return build_here(tmp_path_factory.mktemp("runner") / "executor_runner")


@pytest.fixture(scope="module")
def tiny_pte(tmp_path_factory, session_exports):
    torch.manual_seed(0)
    model = EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()
    inputs = (torch.randint(1000, 30522, (1, 32)), torch.ones(1, 32, dtype=torch.long))
    inputs[1][0, 24:] = 0  # padding, so the mask matters
    return export(model, inputs, tmp_path_factory.mktemp("pte") / "tiny.pte", "fp32", session_exports).path, inputs


def test_the_runner_loads_the_xnnpack_backend_and_the_kernels(runner):
    assert runner.built and REQUIRED_BACKEND in runner.backends and runner.kernels > 100
    again = subprocess.run([runner.path, "--list_backends"], capture_output=True, text=True, check=True)
    assert parse_backends(again.stdout) == (runner.backends, runner.kernels)


def test_its_outputs_equal_the_python_runtime_on_the_same_program(runner, tiny_pte, tmp_path):
    from executorch.runtime import Runtime

    pte, inputs = tiny_pte
    files = []
    for index, tensor in enumerate(inputs):
        files.append(tmp_path / f"input_{index}.bin")
        tensor.numpy().tofile(files[-1])
    done = subprocess.run([runner.path, f"--model_path={pte}", "--num_executions=3", "--cpu_threads=1",
                           f"--inputs={','.join(map(str, files))}", f"--output_dir={tmp_path}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Model executed successfully 3 time(s)" in done.stderr and done.stderr.count("Iteration ") == 3
    expected = Runtime.get().load_program(str(pte)).load_method("forward").execute(list(inputs))[0].numpy()
    got = np.fromfile(tmp_path / "output_0.bin", dtype=np.float32).reshape(expected.shape)
    assert np.abs(got - expected).max() <= 1e-6  # the same XNNPACK kernels: equal up to the last bits at most


def test_it_refuses_inputs_that_do_not_fit_the_program(runner, tiny_pte, tmp_path):
    pte, inputs = tiny_pte
    short = tmp_path / "short.bin"
    inputs[0][:, :16].numpy().tofile(short)
    whole = tmp_path / "mask.bin"
    inputs[1].numpy().tofile(whole)
    done = subprocess.run([runner.path, f"--model_path={pte}", f"--inputs={short},{whole}"], capture_output=True,
                          text=True)
    assert done.returncode == 1 and f"{short} has 128 bytes, input 0 takes 256" in done.stderr
    done = subprocess.run([runner.path, f"--model_path={pte}", f"--inputs={whole}"], capture_output=True, text=True)
    assert done.returncode == 1 and "the program takes 2 inputs, --inputs names 1" in done.stderr
    done = subprocess.run([runner.path, "--model_path=/nonexistent.pte"], capture_output=True, text=True)
    assert done.returncode == 1 and "cannot load method forward of /nonexistent.pte" in done.stderr


def test_bench_times_a_pte_with_it_as_the_native_tool(runner, tiny_pte, tmp_path, capsys):
    pte, _ = tiny_pte
    code = main(["bench", str(pte), "--device", "host", "--binary", runner.path, "--runs", "7", "--warmup", "2",
                 "--threads", "1", "--out", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["runner"] == "executor_runner" and result["runtime"] == "executorch"
    assert result["timed_runs"] == 7 and len(result["latency_ms"]) == 7 and all(ms > 0 for ms in result["latency_ms"])
    assert result["p50_ms"] > 0 and result["load_ms"] > 0
    # the whole process is the app: no interpreter or torch in it (the Python runner starts at about 224 MB); the
    # runner's own getrusage figure, so a run too short for the /proc poll still has one
    assert 0 < result["peak_rss_mb"] < 100
