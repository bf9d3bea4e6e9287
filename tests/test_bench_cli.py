"""`edgeprune bench` as a user runs it: JSON and Markdown saved, --json on stdout, connection overrides,
and timeouts and bad flags as one clean line with their exit codes."""

import json

import pytest
import torch

from edgeprune.cli import main
from edgeprune.export import export
from edgeprune.models.classifier import EncoderClassifier
from tests.conftest import tiny_bert

TINY = ["--max-length", "32", "--quiet", "--threads", "1", "--runs", "5", "--warmup", "1"]


@pytest.fixture(scope="module")
def tflite(tmp_path_factory, session_exports):
    folder = tmp_path_factory.mktemp("bench-cli")
    torch.manual_seed(0)
    model = EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()
    inputs = (torch.randint(1000, 30522, (1, 32)), torch.ones(1, 32, dtype=torch.long))
    return export(model, inputs, folder / "tiny.tflite", "litert-fp32", session_exports).path


def test_json_on_stdout_and_both_reports_saved(tflite, tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(["bench", str(tflite), "--model", str(tiny_bert_dir), "--out", str(out), "--json", *TINY]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((out / "tiny.tflite.host.bench.json").read_text())
    assert printed["device"] == "host" and printed["runtime"] == "litert" and printed["timed_runs"] == 5
    assert printed["energy_source"] in ("unavailable", "measured:rapl")  # host.toml has no power model
    assert printed["energy_detail"] and isinstance(printed["thermal_before_c"], dict)
    markdown = (out / "tiny.tflite.host.bench.md").read_text()
    assert markdown.startswith("# edgeprune bench: tiny.tflite on host") and "| latency p50 |" in markdown


def test_min_seconds_times_beyond_the_runs_until_the_window_is_that_long(tflite, tiny_bert_dir, tmp_path, capsys):
    argv = ["bench", str(tflite), "--model", str(tiny_bert_dir), "--out", str(tmp_path), "--json", *TINY]
    assert main([*argv, "--min-seconds", "0.005"]) == 0
    printed = json.loads(capsys.readouterr().out)
    # a tiny model runs in well under a millisecond: more than --runs 5 fill 5 ms, and no run beyond the one that did
    assert printed["timed_runs"] == len(printed["latency_ms"]) > 5 and sum(printed["latency_ms"]) >= 5
    assert sum(printed["latency_ms"][:-1]) < 5
    assert main([*argv, "--min-seconds", "60"]) == 0  # never more than 100 × --runs
    assert json.loads(capsys.readouterr().out)["timed_runs"] == 500
    assert main([*argv, "--min-seconds", "-1"]) == 2 and "--min-seconds" in capsys.readouterr().err


def test_without_json_stdout_is_the_markdown_report(tflite, tiny_bert_dir, tmp_path, capsys):
    assert main(["bench", str(tflite), "--model", str(tiny_bert_dir), "--out", str(tmp_path), *TINY]) == 0
    printed = capsys.readouterr().out
    assert printed == (tmp_path / "tiny.tflite.host.bench.md").read_text()


def test_a_benchmark_past_its_timeout_exits_6_in_one_line(tflite, tiny_bert_dir, tmp_path, capsys):
    code = main(["bench", str(tflite), "--model", str(tiny_bert_dir), "--out", str(tmp_path), "--timeout-s", "0.05",
                 *TINY])
    err = capsys.readouterr().err
    assert code == 6 and len(err.strip().splitlines()) == 1 and "ran past its 0.05 s timeout" in err, err
    assert not list(tmp_path.glob("*.bench.*"))


def test_a_native_binary_that_is_not_there_exits_2_in_one_line(tflite, tiny_bert_dir, tmp_path, capsys):
    code = main(["bench", str(tflite), "--model", str(tiny_bert_dir), "--out", str(tmp_path),
                 "--binary", "/nonexistent/benchmark_model", *TINY])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "cannot run benchmark_model at /nonexistent/benchmark_model on this machine (exit 127" in err


@pytest.mark.parametrize(("flags", "message"), [
    (["--ssh", "pi@pi5.local", "--adb", "R5CX"], "pass --adb or --ssh, not both"),
    (["--adb-port", "5099"], "--adb-port is for adb; device host connects over local"),
    (["--adb", "R5CX", "--adb-port", "0"], "--adb-port 0: expected a TCP port"),
    (["--timeout-s", "0"], "--timeout-s must be a positive number"),
])
def test_bad_connection_flags_are_one_line(flags, message, tflite, capsys):
    assert main(["bench", str(tflite), *flags, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_adb_overrides_the_profile_connection():
    import argparse

    from edgeprune.cli.devices import endpoint_from
    from edgeprune.devices import load_profile

    args = argparse.Namespace(ssh=None, adb="R5CX21", adb_port=5099, identity=None, trust_on_first_use=False)
    endpoint = endpoint_from(load_profile("pi5"), args)
    assert (endpoint.kind, endpoint.serial, endpoint.adb_port) == ("adb", "R5CX21", 5099)
    phone = endpoint_from(load_profile("android-arm64"), argparse.Namespace(**{**vars(args), "adb_port": None}))
    assert (phone.kind, phone.serial, phone.adb_port) == ("adb", "R5CX21", 5037)  # the profile's server port
