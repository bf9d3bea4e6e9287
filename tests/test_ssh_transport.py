"""The SSH transport and remote benchmarks against a real OpenSSH server on 127.0.0.1 (see tests/sshd.py).

The "device" is this machine behind sshd: same files, but every byte and command goes through the
system ssh client with strict host-key checking, as it would to a Raspberry Pi.
"""

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from edgeprune.bench import benchmark_local, benchmark_on
from edgeprune.cli import main
from edgeprune.devices import load_profile
from edgeprune.devices.transports import open_transport
from edgeprune.devices.transports.base import DeviceTimeoutError
from edgeprune.devices.transports.ssh import SshTransport, parse_target
from edgeprune.errors import DeviceUnreachableError, EdgepruneError, UserInputError
from edgeprune.export import export
from edgeprune.models.classifier import EncoderClassifier
from tests._device_fixtures import running_with, sleeper, unique_marker, wait_for
from tests.conftest import tiny_bert
from tests.sshd import free_port, keygen, start_sshd

AWKWARD = "it's a \"model\" $(touch pwned) `x` file.bin"


def write_profile(folder, server, name="loopback-board"):
    return server.write_profile(folder, name)


@pytest.fixture
def sshd(tmp_path):
    server = start_sshd(tmp_path / "sshd")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory, session_exports):
    """A tiny encoder exported for both runtimes, with inputs shaped like the CLI's at --max-length 32."""
    folder = tmp_path_factory.mktemp("artifacts")
    torch.manual_seed(0)
    model = EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()
    inputs = (torch.randint(1000, 30522, (1, 32)), torch.ones(1, 32, dtype=torch.long))
    paths = {suffix: export(model, inputs, folder / f"tiny{suffix}", recipe, session_exports).path
             for recipe, suffix in (("fp32", ".pte"), ("litert-fp32", ".tflite"))}
    return paths, inputs


def test_push_run_fetch_keep_awkward_names_and_exit_codes(sshd, tmp_path):
    payload = bytes(range(256)) * 1000
    local = tmp_path / AWKWARD
    local.write_bytes(payload)
    with SshTransport(sshd.endpoint()) as transport:
        remote = transport.push(local)
        assert remote == f"{transport.workdir}/{AWKWARD}"
        code, out, err = transport.run(["sh", "-c", 'wc -c < "$1"; printf "%s" "$1"; echo oops >&2; exit 3',
                                        "sh", AWKWARD])
        assert code == 3 and err.strip() == "oops"
        assert out.splitlines() == ["256000", AWKWARD]
        assert transport.run(["ls", "pwned"]).exit_code != 0  # nothing in the name was executed
        assert transport.run(["printenv", "EDGEPRUNE_TEST"], env={"EDGEPRUNE_TEST": "a b 'c' $HOME"}).stdout \
            == "a b 'c' $HOME\n"
        assert transport.fetch(AWKWARD, tmp_path / "back.bin").read_bytes() == payload
        workdir = transport.workdir
    with SshTransport(sshd.endpoint()) as transport:
        assert transport.run(["test", "-e", workdir]).exit_code == 1  # close() removed the work folder


def test_a_command_past_its_timeout_is_stopped(sshd):
    with SshTransport(sshd.endpoint()) as transport:
        start = time.monotonic()
        with pytest.raises(EdgepruneError, match="ran past its 1 s timeout"):
            transport.run(["sleep", "30"], timeout_s=1)
        assert time.monotonic() - start < 10


@pytest.fixture
def sleeping_run(tmp_path):
    """(marker, pids file) of a remote `sleeper`; whatever of it is still running at the end is killed."""
    marker = unique_marker()
    yield marker, tmp_path / "sleeper.pids"
    for pid in running_with(marker):
        os.kill(pid, signal.SIGKILL)


def test_a_timeout_ends_the_command_on_the_device_and_removes_its_folder(sshd, sleeping_run):
    marker, pids = sleeping_run
    with SshTransport(sshd.endpoint()) as transport:
        workdir = transport.workdir
        with pytest.raises(DeviceTimeoutError, match="ran past its 3 s timeout") as error:
            transport.run(sleeper(marker, pids), timeout_s=3)
    assert pids.exists(), "the command never started on the device: the test proves nothing"
    assert wait_for(lambda: running_with(marker) == [], 5), "the command and its child still run on the device"
    assert not os.path.exists(workdir)
    # one line that names the command, not the guard around it
    assert f"timeout: {sys.executable} -c 'import pathlib" in str(error.value) and "\n" not in str(error.value)


def test_ctrl_c_ends_the_command_on_the_device(sshd, sleeping_run):
    marker, pids = sleeping_run

    def interrupt_once_started() -> None:
        if wait_for(pids.exists):
            os.kill(os.getpid(), signal.SIGINT)

    with SshTransport(sshd.endpoint()) as transport:
        workdir = transport.workdir
        ctrl_c = threading.Thread(target=interrupt_once_started)
        ctrl_c.start()
        with pytest.raises(KeyboardInterrupt):
            transport.run(sleeper(marker, pids), timeout_s=60)
        ctrl_c.join()
    assert wait_for(lambda: running_with(marker) == [], 5), "the command and its child still run on the device"
    assert not os.path.exists(workdir)


def test_a_changed_host_key_is_refused_even_with_trust_on_first_use(sshd, tmp_path):
    impostor = keygen(tmp_path / "impostor")
    sshd.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {' '.join(impostor.split()[:2])}\n")
    for trust in (False, True):
        with pytest.raises(DeviceUnreachableError, match="does not match the one in .*known_hosts") as error:
            SshTransport(sshd.endpoint(trust_on_first_use=trust)).run(["true"])
        assert "ssh-keygen -f" in str(error.value) and error.value.exit_code == 5
    assert sshd.host_public_key.split()[1] not in sshd.known_hosts.read_text()


def test_the_changed_host_key_hint_names_the_known_hosts_file_in_use_and_works(sshd, tmp_path):
    """A known_hosts file of the profile's own, in a folder with a space: the hint must clean that file."""
    impostor = keygen(tmp_path / "impostor")
    custom = tmp_path / "team keys" / "board_known_hosts"
    custom.parent.mkdir()
    custom.write_text(f"other.example {' '.join(sshd.host_public_key.split()[:2])}\n"
                      f"[127.0.0.1]:{sshd.port} {' '.join(impostor.split()[:2])}\n")
    endpoint = sshd.endpoint(known_hosts=str(custom))
    with pytest.raises(DeviceUnreachableError) as error:
        SshTransport(endpoint).run(["true"])
    message = str(error.value)
    hint = f"ssh-keygen -f '{custom}' -R '[127.0.0.1]:{sshd.port}'"
    assert f"does not match the one in {custom};" in message and message.endswith(hint) and "\n" not in message
    subprocess.run(["sh", "-c", hint], check=True, capture_output=True, timeout=30)  # the hint, as a user runs it
    assert impostor.split()[1] not in custom.read_text() and "other.example" in custom.read_text()
    with pytest.raises(DeviceUnreachableError, match=f"is not in {custom}; refusing"):  # the old key is gone
        SshTransport(endpoint).run(["true"])


def test_an_unknown_host_key_is_refused_unless_trusted_on_first_use_which_says_so(sshd, capsys):
    sshd.known_hosts.write_text("")
    with pytest.raises(DeviceUnreachableError, match="is not in .*known_hosts; refusing.*--trust-on-first-use"):
        SshTransport(sshd.endpoint()).run(["true"])
    with SshTransport(sshd.endpoint(trust_on_first_use=True)) as transport:
        assert transport.run(["true"]).exit_code == 0
    assert "trusted the new host key" in capsys.readouterr().err
    assert sshd.host_public_key.split()[1] in sshd.known_hosts.read_text()
    with SshTransport(sshd.endpoint()) as transport:  # recorded: strict checking passes from now on
        assert transport.run(["true"]).exit_code == 0


def test_a_wrong_key_is_a_refused_login(sshd, tmp_path):
    keygen(tmp_path / "stranger")
    with pytest.raises(DeviceUnreachableError, match="refused the login .*Permission denied"):
        SshTransport(sshd.endpoint(key=str(tmp_path / "stranger"))).run(["true"])


def test_a_dropped_connection_is_retried_once_then_reported_in_one_line(sshd, capsys):
    transport = SshTransport(sshd.endpoint())
    assert transport.workdir
    killer = threading.Timer(1.0, sshd.kill)
    killer.start()
    start = time.monotonic()
    with pytest.raises(DeviceUnreachableError, match="cannot reach .* \\(tried twice\\): .*refused") as error:
        transport.run(["sleep", "30"], timeout_s=60)
    killer.join()
    assert 1 <= time.monotonic() - start < 20 and "\n" not in str(error.value)
    transport.close()  # the device is gone: cleanup says so and does not raise
    assert "could not remove" in capsys.readouterr().err


def test_an_unreachable_device_exits_5_with_one_line(tmp_path, capsys):
    artifact = tmp_path / "m.pte"
    artifact.write_bytes(b"not really")
    code = main(["bench", str(artifact), "--ssh", f"nobody@127.0.0.1:{free_port()}", "--quiet"])
    err = capsys.readouterr().err
    assert code == 5 and len(err.strip().splitlines()) == 1, err
    assert "cannot reach nobody@127.0.0.1" in err and "Connection refused" in err


@pytest.mark.parametrize(("text", "expected"), [
    ("pi@pi5.local", ("pi", "pi5.local", 22)), ("root@10.0.0.2:2222", ("root", "10.0.0.2", 2222)),
    ("me@[::1]:2200", ("me", "::1", 2200)),
])
def test_ssh_targets_parse(text, expected):
    assert parse_target(text) == expected


@pytest.mark.parametrize("text", ["pi5.local", "@host", "pi@", "pi@host:port", "pi@host:70000"])
def test_bad_ssh_targets_are_refused(text):
    with pytest.raises(UserInputError, match="expected USER@HOST"):
        parse_target(text)


def test_devices_check_over_ssh_reports_the_device(sshd, tmp_path, capsys):
    profile = write_profile(tmp_path, sshd)
    assert main(["devices", "check", str(profile)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["connection"] == f"{sshd.user}@127.0.0.1:{sshd.port}" and report["ok"]
    assert report["arch"] == platform.machine() and report["cores"] == os.cpu_count() and report["ram_mb"] > 0
    assert report["python"] == platform.python_version() and report["runtimes"]["executorch"] == "1.5.1"
    sensors = report["sensors"]
    assert set(sensors["power"]) == {"battery", "ina3221", "rapl", "tegrastats", "vcgencmd"}
    assert set(sensors["thermal"]) == {"thermal-zones", "thermalservice", "vcgencmd-throttled"}
    assert all(text.startswith(("readable: ", "unavailable: ")) for text in sensors["power"].values())
    if shutil.which("vcgencmd") is None:
        assert sensors["power"]["vcgencmd"] == "unavailable: vcgencmd is not installed on the device"


@pytest.mark.integration
@pytest.mark.parametrize(("suffix", "runtime"), [(".pte", "executorch"), (".tflite", "litert")])
def test_benchmark_over_ssh_runs_the_artifact_on_the_device(sshd, artifacts, suffix, runtime):
    paths, inputs = artifacts
    profile_python = sys.executable  # the device's python with numpy and the runtimes
    with open_transport(sshd.endpoint(), profile_python) as transport:
        result = benchmark_on(transport, paths[suffix], inputs, None, 1, warmup=1, runs=5, device="loopback-board")
    assert result.device == "loopback-board" and result.runtime == runtime and result.threads == 1
    assert result.timed_runs == 5 and len(result.latency_ms) == 5 and 0 < result.p50_ms <= result.p99_ms
    assert result.file_bytes == paths[suffix].stat().st_size and result.peak_rss_mb > result.rss_before_load_mb > 0


@pytest.mark.integration
def test_benchmark_local_is_the_local_transport_case(artifacts):
    paths, inputs = artifacts
    result = benchmark_local(paths[".pte"], inputs, 1, warmup=1, runs=3)
    assert result.device == "host" and result.runtime == "executorch" and result.timed_runs == 3


@pytest.mark.integration
def test_cli_bench_uses_the_profile_connection(sshd, artifacts, tiny_bert_dir, tmp_path, capsys):
    paths, _ = artifacts
    profile = write_profile(tmp_path, sshd)
    assert load_profile(str(profile)).endpoint.port == sshd.port
    assert main(["bench", str(paths[".tflite"]), "--device", str(profile), "--model", str(tiny_bert_dir),
                 "--max-length", "32", "--runs", "3", "--warmup", "1", "--quiet", "--json",
                 "--out", str(tmp_path)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["device"] == "loopback-board" and result["runtime"] == "litert" and result["threads"] == 1
    assert result["energy_source"] in ("unavailable", "measured:rapl") and "energy_detail" in result
    assert (tmp_path / f"{paths['.tflite'].name}.loopback-board.bench.md").read_text().startswith("# edgeprune bench")


def test_an_ssh_command_past_its_timeout_exits_6_in_one_line(sshd, artifacts, tiny_bert_dir, tmp_path, capsys):
    paths, _ = artifacts
    profile = write_profile(tmp_path, sshd)
    code = main(["bench", str(paths[".tflite"]), "--device", str(profile), "--model", str(tiny_bert_dir),
                 "--max-length", "32", "--quiet", "--timeout-s", "0.05", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 6 and len(err.strip().splitlines()) == 1, err
    assert f"a command on {sshd.user}@127.0.0.1:{sshd.port} ran past its 0.05 s timeout" in err


def test_devices_check_of_an_unreachable_host_exits_5_and_ssh_flags_need_ssh(capsys):
    assert main(["devices", "check", "pi5", "--ssh", f"pi@127.0.0.1:{free_port()}"]) == 5
    err = capsys.readouterr().err
    assert "cannot reach pi@127.0.0.1" in err and len(err.strip().splitlines()) == 1
    assert main(["devices", "check", "host", "--trust-on-first-use"]) == 2
    assert "--identity and --trust-on-first-use are for ssh" in capsys.readouterr().err


def test_a_missing_sshd_fails_the_fixture_and_says_to_run_make_test(tmp_path, monkeypatch):
    import tests.sshd as helper

    monkeypatch.setattr(helper.shutil, "which", lambda name: None)
    monkeypatch.setattr(helper.os.path, "exists", lambda path: False)
    with pytest.raises(pytest.fail.Exception, match="run `make test`"):
        start_sshd(tmp_path / "sshd")


def test_the_local_transport_has_the_same_contract(tmp_path):
    from edgeprune.devices.transports.local import LocalEndpoint, LocalTransport

    (tmp_path / AWKWARD).write_text("one")
    with LocalTransport(LocalEndpoint()) as transport:
        transport.push(tmp_path / AWKWARD)
        (tmp_path / "two").write_text("two")
        transport.push(tmp_path / "two", AWKWARD)  # replaces
        code, out, err = transport.run(["sh", "-c", 'cat "$1"; echo oops >&2; exit 4', "sh", AWKWARD])
        assert (code, out, err.strip()) == (4, "two", "oops") and transport.python == sys.executable
        assert transport.fetch(AWKWARD, tmp_path / "back").read_text() == "two"
        workdir = transport.workdir
    assert not os.path.exists(workdir) and (tmp_path / "two").exists()
