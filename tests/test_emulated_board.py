"""The device path end to end on the emulated arm64 board (edgeprune/devices/emulated_board.py).

The board is a Debian bookworm arm64 root whose own sshd, shell, Python and runtimes are aarch64 builds run
by QEMU user mode; edgeprune reaches it only over ssh with strict host-key checking, as it would a Pi.
These tests need root (chroot, mounts, binfmt_misc) and take minutes: they run in `make test-board`
(`pytest -m board`), which installs qemu-user-static, binfmt-support and debootstrap. The root, the
wheels and the board's runtime environment are cached under the edgeprune cache folder.
"""

import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeprune.cli import main
from edgeprune.devices import emulated_board, load_profile
from edgeprune.devices.setup import host_version, setup_device
from edgeprune.export import export
from edgeprune.models.classifier import EncoderClassifier
from tests.conftest import tiny_bert
from tests.sshd import free_port, keygen

pytestmark = [pytest.mark.board, pytest.mark.integration]

# read at import, before tests/conftest.py points EDGEPRUNE_CACHE at a fresh folder per test: the board's
# root, the wheels for it and its environment are built once and kept here
BOARD_CACHE = emulated_board.cache_dir()
BUNDLED_PROFILE = Path(__file__).resolve().parents[1] / "devices" / "pi5-emulated.toml"
LABEL = emulated_board.EMULATION_LABEL
TINY = ["--max-length", "32", "--quiet", "--threads", "1"]


def write_profile(folder: Path, board: emulated_board.Board, known_hosts: str | None = None,
                  env: str | None = None) -> Path:
    """The bundled pi5-emulated profile, pointed at this test's board (port, keys, and the CPUs QEMU shows)."""
    text = BUNDLED_PROFILE.read_text()
    text = text.replace("port = 2222", f"port = {board.port}").replace("cores = 2", f"cores = {os.cpu_count()}")
    text = text.replace("threads = 2", "threads = 1")
    text = text.replace('key = "~/.cache/edgeprune/board/id_ed25519"', f'key = "{board.identity}"')
    text = text.replace('known_hosts = "~/.cache/edgeprune/board/known_hosts"',
                        f'known_hosts = "{known_hosts or board.known_hosts}"')
    if env:
        text = text.replace('env = "/home/pi/.edgeprune/env"', f'env = "{env}"')
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pi5-emulated.toml"
    path.write_text(text)
    return path


def on_board(board: emulated_board.Board, command: str) -> subprocess.CompletedProcess:
    """One command on the board over ssh, as a user would type it."""
    return subprocess.run(["ssh", "-T", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={board.known_hosts}",
                           "-i", board.identity, "-p", str(board.port), f"{board.user}@127.0.0.1", command],
                          capture_output=True, text=True, timeout=120)


def show(request, line: str) -> None:
    """Say what a first build cost, past pytest's capture: `make test-board` shows it."""
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        print(f"\n{line}", flush=True)


def board_processes(board: emulated_board.Board, word: str) -> list[int]:
    """PIDs of processes running on the board (their root is the board's) with `word` in their command line."""
    found = []
    for pid in emulated_board.processes_in(Path(board.root)):
        try:
            if word.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def board(request, tmp_path_factory):
    if "board" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the emulated-board tests run in `make test-board` (pytest -m board): they need root and minutes")
    if os.geteuid() != 0:
        pytest.fail("the emulated board needs root (debootstrap, chroot, mounts)", pytrace=False)
    missing = [tool for tool in ("qemu-aarch64-static", "debootstrap", "ssh", "ssh-keygen") if not shutil.which(tool)]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `make test-board`, which installs them", pytrace=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEPRUNE_CACHE", str(BOARD_CACHE))
        costs = emulated_board.build()  # cached: {} unless the recipe changed
        if costs:
            show(request, f"built the board's arm64 root: {costs}")
        started = emulated_board.start(port=free_port(), folder=tmp_path_factory.mktemp("board"))
    yield started
    emulated_board.stop(started)


@pytest.fixture
def profiles(board, tmp_path, monkeypatch):
    """A device folder with the board's profile; this test's own environment record and the shared wheel cache."""
    folder = tmp_path / "devices"
    write_profile(folder, board)
    monkeypatch.setenv("EDGEPRUNE_DEVICES", str(folder))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("EDGEPRUNE_CACHE", str(BOARD_CACHE))
    return folder


@pytest.fixture(scope="module")
def provisioned(board, request, tmp_path_factory):
    """The profile's environment on the board, set up once (a no-op when the cached root already holds it)."""
    folder = tmp_path_factory.mktemp("provisioned")
    profile = load_profile(str(write_profile(folder, board)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEPRUNE_CACHE", str(BOARD_CACHE))
        patch.setenv("XDG_CONFIG_HOME", str(folder / "config"))
        report = setup_device(profile, offline=True)
    # ready, whatever this run had to do: a cached root may hold the wheels and need only the runner rebuilt (its
    # source changed), or need nothing
    runner = report.tools["executorch"]
    assert "XnnpackBackend" in runner["backends"], report.tools
    if report.changed:
        built = f"built in {runner['seconds']:g} s" if runner["built"] else "in place"
        show(request, f"set up the board's environment: installed {sorted(report.installed) or 'nothing'} in "
                      f"{report.install_s} s, runner {built}, first import {report.import_s}")
    return report


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("artifacts")
    torch.manual_seed(0)
    model = EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()
    inputs = (torch.randint(1000, 30522, (1, 32)), torch.ones(1, 32, dtype=torch.long))
    exported = {suffix: export(model, inputs, folder / f"tiny{suffix}", recipe).path
                for recipe, suffix in (("fp32", ".pte"), ("litert-fp32", ".tflite"))}
    return {**exported, "inputs": inputs}


def test_setup_installs_the_runtimes_then_does_nothing_and_check_reports_aarch64(board, profiles, tmp_path, capsys,
                                                                               request):
    env = f"/home/pi/.edgeprune/test-{uuid.uuid4().hex[:8]}"  # fresh: this run must install
    write_profile(profiles, board, env=env)
    target = ["--ssh", board.target, "--identity", board.identity]
    try:
        assert main(["devices", "setup", "pi5-emulated", "--offline", "--json", *target]) == 0
        first = json.loads(capsys.readouterr().out)
        wanted = {"ai-edge-litert": host_version("ai-edge-litert"), "numpy": host_version("numpy"),
                  "executorch": host_version("executorch")}  # the wheel alone: no torch on the board
        assert first["arch"] == "aarch64" and first["env"] == env and first["created_env"] is True
        assert first["installed"] == wanted == first["wanted"] and first["changed"] is True
        assert first["emulated"] == LABEL and first["os"].startswith("Debian GNU/Linux 12")
        assert first["import_s"]["litert"] > 0 and "executorch" not in first["import_s"]
        runner = first["tools"]["executorch"]  # compiled there by the board's g++ from the wheel's libraries
        assert runner["path"] == f"{env}/bin/executor_runner" and runner["built"] is True and runner["seconds"] > 0
        assert "XnnpackBackend" in runner["backends"] and runner["kernels"] > 100
        assert on_board(board, f"{env}/bin/python -c 'import torch'").returncode != 0
        show(request, f"setup on the board: install {first['install_s']} s, first import "
                                  f"{first['import_s']}, runner built in {runner['seconds']} s")

        assert main(["devices", "setup", "pi5-emulated", "--offline", *target]) == 0
        again = capsys.readouterr().out
        assert "nothing to do: ai-edge-litert" in again and "installed from" not in again
        assert f"executorch runner {env}/bin/executor_runner: in place; loads XnnpackBackend" in again

        assert main(["devices", "check", "pi5-emulated"]) == 0
        check = json.loads(capsys.readouterr().out)
        assert check["arch"] == "aarch64" and check["ok"] is True and check["problems"] == []
        assert check["python_path"] == f"{env}/bin/python" and check["runtimes"]["litert"] == wanted["ai-edge-litert"]
        assert check["numpy"] == wanted["numpy"] and check["emulated"] == LABEL
        assert check["tools"] == {"executorch": f"ready: {env}/bin/executor_runner"}
        record = json.loads((tmp_path / "config" / "edgeprune" / "environments.json").read_text())
        assert record[f"ssh:pi@127.0.0.1:{board.port}"]["python"] == f"{env}/bin/python"
    finally:
        on_board(board, f"rm -rf {env}")


def test_bench_runs_a_tflite_on_the_board_with_emulated_figures(provisioned, profiles, artifacts, tiny_bert_dir,
                                                                 tmp_path, capsys):
    code = main(["bench", str(artifacts[".tflite"]), "--device", "pi5-emulated", "--model", str(tiny_bert_dir),
                 "--out", str(tmp_path), "--json", "--runs", "5", "--warmup", "1", *TINY])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["device"] == "pi5-emulated" and result["runtime"] == "litert"
    assert result["emulated"] == LABEL and result["measured"] is True
    assert len(result["latency_ms"]) == 5 and all(ms > 0 for ms in result["latency_ms"])
    assert result["peak_rss_mb"] > 0
    markdown = (tmp_path / "tiny.tflite.pi5-emulated.bench.md").read_text()
    assert f"**{LABEL}**" in markdown and "say nothing about a real board" in markdown


def test_bench_runs_a_pte_on_the_board_with_the_runner_setup_built(provisioned, profiles, artifacts, tmp_path,
                                                                    capsys):
    code = main(["bench", str(artifacts[".pte"]), "--device", "pi5-emulated", "--out", str(tmp_path), "--json",
                 "--runs", "5", "--warmup", "1", "--threads", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["device"] == "pi5-emulated" and result["runtime"] == "executorch"
    assert result["runner"] == "executor_runner" and result["emulated"] == LABEL and result["measured"] is True
    assert len(result["latency_ms"]) == 5 and all(ms > 0 for ms in result["latency_ms"]) and result["load_ms"] > 0
    assert result["peak_rss_mb"] > 0
    markdown = (tmp_path / "tiny.pte.pi5-emulated.bench.md").read_text()
    assert f"**{LABEL}**" in markdown and "executor_runner" in markdown


def board_output(provisioned, pte: Path, inputs: tuple, tmp_path: Path) -> np.ndarray:
    """The program's first output (float32, flat) from the board's native runner on raw `inputs`."""
    from edgeprune.devices.transports import open_transport

    profile = load_profile("pi5-emulated")
    with open_transport(profile.endpoint, provisioned.env_python) as transport:
        files = []
        for index, tensor in enumerate(inputs):
            tensor.numpy().tofile(tmp_path / f"input_{index}.bin")
            files.append(transport.push(tmp_path / f"input_{index}.bin"))
        remote = transport.push(pte)
        done = transport.run([profile.native_binaries["executorch"], f"--model_path={remote}", "--cpu_threads=1",
                              f"--inputs={','.join(files)}", f"--output_dir={transport.workdir}"], timeout_s=600)
        assert done.exit_code == 0, done.stderr
        got = np.fromfile(transport.fetch("output_0.bin", tmp_path / "board_output.bin"), dtype=np.float32)
    return got


def test_the_pte_gives_on_the_arm64_board_what_it_gives_here(provisioned, profiles, artifacts, tmp_path, request):
    from executorch.runtime import Runtime

    pte = artifacts[".pte"]
    inputs = artifacts["inputs"]
    got = board_output(provisioned, pte, inputs, tmp_path)
    expected = Runtime.get().load_program(str(pte)).load_method("forward").execute(list(inputs))[0].numpy()
    # aarch64 XNNPACK kernels (NEON, other accumulation order) against x86's: equal to rounding
    difference = float(np.abs(got - expected.ravel()).max())
    show(request, f"the .pte on aarch64 against x86: largest output difference {difference:.2e}")
    assert got.shape == (expected.size,) and difference < 1e-4
    assert np.abs(expected).max() > 0.01  # not a trivially small output


def shipped_generator(folder, name: str, recipe: str):  # noqa: ANN001 - a Path
    """A KV-cached generator (a GQA Llama pruned unevenly) shipped with a tokenizer, as a causal-lm fit ships it."""
    from tests._byo import copy_tokenizer
    from tests.test_generation import PREFILL, tiny_decoder

    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    path = export(tiny_decoder(), example, folder / name, recipe, verify_on=[example]).path
    copy_tokenizer(folder)
    return path


@pytest.fixture(scope="module")
def generator(tmp_path_factory):
    return shipped_generator(tmp_path_factory.mktemp("generator"), "model.pte", "fp32")


@pytest.mark.parametrize("recipe", ["int4-linear", "int4-decoder"])  # symmetric groups; split asymmetric blocks
def test_a_4bit_generators_prefill_gives_on_the_board_what_it_gives_here(provisioned, board, profiles, tmp_path,
                                                                         request, recipe):
    """The int4 kernels XNNPACK picks for a many-token prefill depend on the CPU: the board emulates a Pi 5's
    Cortex-A76 (QEMU's default model's i8mm kernels gave wrong logits here)."""
    from executorch.runtime import Runtime

    from tests.test_generation import PREFILL, tiny_decoder

    assert on_board(board, "echo $QEMU_CPU").stdout.strip() == emulated_board.BOARD_CPU
    example = (torch.arange(PREFILL)[None] * 7 % 90 + 3, torch.arange(PREFILL))
    pte = export(tiny_decoder(), example, tmp_path / "int4.pte", recipe, verify_on=[example]).path
    got = board_output(provisioned, pte, example, tmp_path)
    expected = Runtime.get().load_program(str(pte)).load_method("forward").execute(list(example))[0].numpy().ravel()
    cosine = float(got @ expected / (np.linalg.norm(got) * np.linalg.norm(expected)))
    show(request, f"a {recipe} prefill on aarch64 against x86: cosine {cosine:.6f}")
    assert got.shape == expected.shape and cosine > 0.999


def test_a_generator_generates_on_the_board_the_tokens_it_generates_here(provisioned, profiles, generator, capsys,
                                                                         request):
    command = ["generate", str(generator), "--prompt", "the bank said it would", "--max-new-tokens", "24", "--json"]
    assert main(command) == 0  # here: ExecuTorch's Python runtime
    here = json.loads(capsys.readouterr().out)
    code = main([*command, "--device", "pi5-emulated"])  # there: the board's native runner, over ssh
    captured = capsys.readouterr()
    assert code == 0, captured.err
    there = json.loads(captured.out)
    show(request, f"greedy tokens on the arm64 board: {there['tokens'][:8]}... (here: {here['tokens'][:8]}...)")
    assert there["tokens"] == here["tokens"] and len(here["tokens"]) >= 8


def test_generate_bench_on_the_board_times_prefill_and_decode(provisioned, profiles, generator, tmp_path, capsys):
    code = main(["generate", str(generator), "--bench", "--device", "pi5-emulated", "--depths", "8,32", "--runs",
                 "1", "--threads", "1", "--out", str(tmp_path), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["ttft_ms"] > 0 and [d["depth"] for d in result["decode"]] == [8, 32]
    assert all(d["tokens"] > 0 and d["seconds"] > 0 for d in result["decode"]) and result["peak_rss_mb"] > 0
    assert result["device"] == "pi5-emulated" and result["emulated"] == LABEL
    assert f"**{LABEL}**" in (tmp_path / "generation.md").read_text()


def greedy_here_and_on_board(path, new_tokens: int, capsys) -> tuple[dict, dict]:  # noqa: ANN001 - Path, fixture
    """`edgeprune generate --json` of `path` here, then on the emulated board over ssh: both results."""
    command = ["generate", str(path), "--prompt", "the bank said it would", "--max-new-tokens", str(new_tokens),
               "--json"]
    assert main(command) == 0
    here = json.loads(capsys.readouterr().out)
    code = main([*command, "--device", "pi5-emulated"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return here, json.loads(captured.out)


@pytest.fixture(scope="module")
def litert_generator(tmp_path_factory):
    """The same generator as a LiteRT .tflite (prefill and decode signatures, the cache as state)."""
    return shipped_generator(tmp_path_factory.mktemp("litert-generator"), "model.tflite", "litert-fp32")


def test_a_litert_generator_generates_on_the_board_the_tokens_it_generates_here(provisioned, profiles,
                                                                                litert_generator, capsys, request):
    """On the board the .tflite is run by LiteRT's generator module under the board's Python (ai-edge-litert's
    aarch64 wheel, no edgeprune or torch there), pushed over ssh."""
    here, there = greedy_here_and_on_board(litert_generator, 24, capsys)
    show(request, f"LiteRT greedy tokens on the arm64 board: {there['tokens'][:8]}... (here: {here['tokens'][:8]}...)")
    assert there["tokens"] == here["tokens"] and len(here["tokens"]) >= 8
    code = main(["generate", str(litert_generator), "--bench", "--device", "pi5-emulated", "--depths", "8", "--runs",
                 "1", "--threads", "1", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["ttft_ms"] > 0 and [d["depth"] for d in result["decode"]] == [8] and result["emulated"] == LABEL


def test_a_wrong_host_key_is_refused(board, profiles, tmp_path, capsys):
    other = keygen(tmp_path / "other_host_key")
    wrong = tmp_path / "wrong_known_hosts"
    wrong.write_text(f"[127.0.0.1]:{board.port} {' '.join(other.split()[:2])}\n")
    write_profile(profiles, board, known_hosts=str(wrong))
    code = main(["devices", "check", "pi5-emulated"])
    err = capsys.readouterr().err
    assert code == 5 and len(err.strip().splitlines()) == 1, err
    assert "does not match the one in" in err and str(wrong) in err


@pytest.mark.parametrize(("suffix", "runner"), [(".tflite", "edgeprune_runner.py"), (".pte", "executor_runner")])
def test_a_timeout_leaves_no_runner_on_the_board(provisioned, board, profiles, artifacts, tiny_bert_dir, tmp_path,
                                                 capsys, suffix, runner):
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:  # the runner's PIDs on the board while the benchmark runs
        while not done.is_set():
            seen.update(board_processes(board, runner))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        code = main(["bench", str(artifacts[suffix]), "--device", "pi5-emulated", "--model", str(tiny_bert_dir),
                     "--out", str(tmp_path), "--runs", "10000000", "--warmup", "0", "--timeout-s", "20", *TINY])
    finally:
        done.set()
        watcher.join()
    err = capsys.readouterr().err
    assert code == 6 and "ran past its 20 s timeout" in err, err
    assert seen, "the runner never started on the board within the timeout"
    deadline = time.monotonic() + 10
    while board_processes(board, runner) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not board_processes(board, runner)
    assert runner not in on_board(board, "ps ax -o args").stdout


def test_fit_on_the_board_measures_its_candidates_there_and_labels_them(provisioned, profiles, tiny_bert_dir,
                                                                        tmp_path, capsys):
    out = tmp_path / "fit"
    code = main(["fit", "--model", str(tiny_bert_dir), "--device", "pi5-emulated", "--max-mb", "50",
                 "--recipe", "litert-fp32", "--ffn-fractions", "0", "--layer-removals", "0", "--no-trim-vocab",
                 "--max-length", "32", "--scoring-examples", "16", "--quiet", "--out", str(out), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result["message"]
    assert result["device"] == "pi5-emulated" and result["status"] == "fit"
    benchmarks = [result["dense"]["benchmark"], result["fitted"]["benchmark"],
                  *(c["benchmark"] for c in result["candidates"] if c["benchmark"])]
    assert len(benchmarks) >= 2
    for bench in benchmarks:
        assert bench["measured"] is True and bench["device"] == "pi5-emulated" and bench["runtime"] == "litert"
        assert bench["emulated"] == LABEL and bench["p50_ms"] > 0
    latency = next(c for c in result["fitted"]["checks"] if c["name"] == "latency p50")
    assert latency["source"] == "measured" and latency["passed"] is True  # the profile's 2000 ms, on the board
    markdown = (out / "report.md").read_text()
    assert "**Emulated** — the timings were measured on pi5-emulated, " + LABEL in markdown
    assert "say nothing about a real Pi" in markdown and f"measured, {LABEL}" in markdown
    assert f"measured on pi5-emulated, {LABEL}" in markdown  # the budget table's source column
    html = (out / "report.html").read_text()
    assert 'id="emulated"' in html and "say nothing about a real Pi" in html
    assert f"measured on pi5-emulated, {LABEL}" in html


def test_a_decoder_fit_on_the_board_times_generation_there_by_the_native_runner(provisioned, profiles, tmp_path,
                                                                                capsys):
    """A causal-lm fit for the board's ExecuTorch: the program attends portably (the native runner links no LLM
    kernels), every candidate's forward and decode step are timed on the board, and the shipped generator's
    generation.json comes from the board's runner."""
    from tests._byo import tiny_llama_dir
    from tests.test_fit_decoder import decoder_data

    model = tiny_llama_dir(tmp_path / "llama", heads=8, kv_heads=2)
    out = tmp_path / "fit"
    code = main(["fit", "--task", "causal-lm", "--model", str(model), "--data", str(decoder_data(tmp_path)),
                 "--device", "pi5-emulated", "--runtime", "executorch", "--recipe", "fp32", "--max-mb", "7.925",
                 "--min-decode-tps", "1", "--recover-steps", "0", "--ffn-fractions", "0", "--layer-removals", "0",
                 "--max-length", "16", "--scoring-examples", "8", "--quiet", "--out", str(out), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result["message"]
    bench = result["fitted"]["benchmark"]
    assert bench["runner"] == "executor_runner" and bench["emulated"] == LABEL and bench["decode_p50_ms"] > 0
    assert result["task"]["attention"] == "portable"
    generation = json.loads((out / "generation.json").read_text())
    assert generation["device"] == "pi5-emulated" and generation["emulated"] == LABEL
    assert generation["decode"] and generation["ttft_ms"] > 0 and generation["peak_rss_mb"] > 0


def test_a_litert_generator_with_its_output_layer_at_4_bits_generates_on_the_board_as_here(
        provisioned, profiles, tmp_path, capsys, request):
    """litert-int4-all: the embedding looked up in the output layer's 4-bit codes (GATHER on int8 pairs and int16
    steps, then elementwise unpacking), run by the board's aarch64 LiteRT."""
    from tests._byo import copy_tokenizer
    from tests.test_tied_output import PREFILL, calibration, tied_decoder

    example = (torch.arange(PREFILL)[None] % 90 + 3, torch.arange(PREFILL))
    path = export(tied_decoder(vocab=30522, layer_std=0.2), example, tmp_path / "model.tflite", "litert-int4-all",
                  calibration=calibration(vocab=30522), verify_on=[example]).path
    copy_tokenizer(tmp_path)
    here, there = greedy_here_and_on_board(path, 16, capsys)
    show(request, f"litert-int4-all greedy tokens on the arm64 board: {there['tokens'][:8]}... (here: "
                  f"{here['tokens'][:8]}...)")
    assert there["tokens"] == here["tokens"] and len(set(here["tokens"])) >= 4  # not one token repeated
