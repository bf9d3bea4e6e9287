"""The ADB transport: its pure parts (exit-status marker, taskset mask), then the real `adb` client
against a loopback stand-in for a phone (tests/adb_peer.py)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from edgeprune.devices.transports import adb as adb_module
from edgeprune.devices.transports.adb import (
    AdbEndpoint,
    AdbTransport,
    CpuPolicy,
    parse_cpu_list,
    parse_cpufreq_policies,
    split_exit_marker,
    taskset_mask,
    with_exit_marker,
)
from edgeprune.devices.transports.base import DeviceTimeoutError
from edgeprune.devices.transports.workdirs import OWNER_FILE
from edgeprune.errors import DeviceUnreachableError
from tests._device_fixtures import running_with, sleeper, unique_marker, wait_for
from tests.adb_peer import AdbPeer
from tests.sshd import free_port

# `grep -H . .../policy*/related_cpus .../policy*/cpuinfo_max_freq` on a Pixel 8 (Tensor G3)
PIXEL8 = """/sys/devices/system/cpu/cpufreq/policy0/related_cpus:0 1 2 3
/sys/devices/system/cpu/cpufreq/policy4/related_cpus:4 5 6 7
/sys/devices/system/cpu/cpufreq/policy8/related_cpus:8
/sys/devices/system/cpu/cpufreq/policy0/cpuinfo_max_freq:1704000
/sys/devices/system/cpu/cpufreq/policy4/cpuinfo_max_freq:2367000
/sys/devices/system/cpu/cpufreq/policy8/cpuinfo_max_freq:2914000
"""


@pytest.mark.parametrize(("output", "expected"), [
    ("hello\n\n__edgeprune_rc=0\n", (0, "hello\n")),
    ("no newline at the end\n__edgeprune_rc=3\n", (3, "no newline at the end")),
    ("a\r\nb\r\n\r\n__edgeprune_rc=127\r\n", (127, "a\nb\n")),  # a pty's CRLF
    ("\n__edgeprune_rc=1", (1, "")),
    ("looks like __edgeprune_rc=9 inside\n\n__edgeprune_rc=2\n", (2, "looks like __edgeprune_rc=9 inside\n")),
])
def test_exit_marker_is_split_from_the_output(output, expected):
    assert split_exit_marker(output) == expected


@pytest.mark.parametrize("output", ["hello\n", "partial\n__edgeprune_rc=", "\n__edgeprune_rc=x\n"])
def test_a_missing_or_broken_marker_is_an_error(output):
    with pytest.raises(ValueError, match="marker"):
        split_exit_marker(output)


def test_the_marker_line_round_trips_through_a_real_shell():
    for command, code in (("echo hi", 0), ("printf 'no newline'; false", 1), ("exit 7", 7)):
        line = with_exit_marker(f"sh -c {command!r}")
        output = subprocess.run(["sh", "-c", line], capture_output=True, text=True).stdout
        assert split_exit_marker(output)[0] == code


def test_cpu_lists_in_both_sysfs_forms():
    assert parse_cpu_list("0-3,8") == (0, 1, 2, 3, 8)
    assert parse_cpu_list("4 5 6 7\n") == (4, 5, 6, 7)
    assert parse_cpu_list("2") == (2,)


def test_pixel8_policies_and_masks_take_the_fastest_cores_first():
    policies = parse_cpufreq_policies(PIXEL8)
    assert sorted(policies, key=lambda p: p.cpus) == [CpuPolicy((0, 1, 2, 3), 1704000),
                                                      CpuPolicy((4, 5, 6, 7), 2367000), CpuPolicy((8,), 2914000)]
    assert taskset_mask(policies, 1) == "100"  # the X3
    assert taskset_mask(policies, 4) == "170"  # the X3 and three A715s
    assert taskset_mask(policies, 5) == "1f0"
    assert taskset_mask(policies, 9) == taskset_mask(policies, 64) == "1ff"


def test_a_single_cluster_board_uses_its_first_cores():
    policies = [CpuPolicy((0, 1, 2, 3), 2400000)]
    assert taskset_mask(policies, 2) == "3" and taskset_mask(policies, 4) == "f"


def test_bad_policy_input_is_refused():
    with pytest.raises(ValueError, match="threads"):
        taskset_mask([CpuPolicy((0,), 1)], 0)
    with pytest.raises(ValueError, match="no cpufreq policies"):
        parse_cpufreq_policies("/sys/devices/system/cpu/cpufreq/policy0/related_cpus:0 1\n")


# --- the real adb client against tests/adb_peer.py, a loopback stand-in for a phone -----------------------------

@pytest.fixture
def adb_server(tmp_path, monkeypatch):
    """An adb server of our own on a free port, with its keys in a temporary folder; killed afterwards."""
    if shutil.which("adb") is None:
        pytest.fail("the adb client is not installed: run `make test`, which installs it with apt-get",
                    pytrace=False)
    port = free_port()
    # adb keeps its key and logs in ~/.android; this adb's home is a temporary folder
    monkeypatch.setenv("HOME", str(tmp_path / "android-home"))
    monkeypatch.setenv("ANDROID_SDK_HOME", str(tmp_path / "android-home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "android-home"))  # the server's log
    monkeypatch.delenv("ADB_SERVER_SOCKET", raising=False)
    (tmp_path / "android-home" / ".android").mkdir(parents=True)
    subprocess.run(["adb", "-P", str(port), "start-server"], check=True, capture_output=True, timeout=60)
    yield port
    subprocess.run(["adb", "-P", str(port), "kill-server"], capture_output=True, timeout=60)


@pytest.fixture
def phone(adb_server, tmp_path, monkeypatch):
    """The peer, connected through our adb server; the transport's device folder is a temporary one."""
    peer = AdbPeer()
    done = subprocess.run(["adb", "-P", str(adb_server), "connect", peer.serial], capture_output=True, text=True,
                          timeout=30)
    assert "connected to" in done.stdout, done.stdout + done.stderr
    state = subprocess.run(["adb", "-P", str(adb_server), "-s", peer.serial, "wait-for-device", "get-state"],
                           capture_output=True, text=True, timeout=30)
    assert state.stdout.strip() == "device", state.stdout + state.stderr
    device_root = tmp_path / "data-local-tmp"
    device_root.mkdir()
    monkeypatch.setattr(adb_module, "DEVICE_ROOT", str(device_root))
    yield peer, AdbEndpoint(serial=peer.serial, adb_port=adb_server)
    peer.stop()


def test_push_run_fetch_through_the_real_adb_client(phone, tmp_path):
    peer, endpoint = phone
    name = "it's a \"model\" $(touch pwned) file.bin"
    payload = bytes(range(256)) * 600  # several sync DATA chunks
    (tmp_path / name).write_bytes(payload)
    with AdbTransport(endpoint) as transport:
        remote = transport.push(tmp_path / name)
        assert remote.startswith(adb_module.DEVICE_ROOT + "/edgeprune.")
        code, out, err = transport.run(["sh", "-c", 'wc -c < "$1"; echo oops >&2; exit 3', "sh", name])
        assert (code, out.split(), err) == (3, ["153600", "oops"], "")  # legacy shell: stderr is merged
        assert transport.run(["ls", "pwned"]).exit_code != 0
        assert transport.run(["printenv", "X"], env={"X": "a 'b' $c"}).stdout == "a 'b' $c\n"
        assert transport.fetch(name, tmp_path / "back.bin").read_bytes() == payload
        workdir = transport.workdir
    assert not Path(workdir).exists()


def test_a_folder_on_the_phone_left_by_a_killed_process_goes_with_the_next_transport(phone):
    """A fit killed with SIGKILL cannot remove its folder on the phone; the next transport from this machine does
    (the owner records and the line are tested in tests/test_remote_cleanup.py)."""
    peer, endpoint = phone
    ended = subprocess.Popen(["true"])
    ended.wait(timeout=10)
    orphan, older = Path(adb_module.DEVICE_ROOT) / "edgeprune.killed", Path(adb_module.DEVICE_ROOT) / "edgeprune.old"
    orphan.mkdir()
    older.mkdir()  # no owner file: left alone
    (orphan / OWNER_FILE).write_text(f"{ended.pid} {socket.gethostname()}\n")
    with AdbTransport(endpoint) as transport:
        mine = Path(transport.workdir)
        assert not orphan.exists() and older.is_dir()
        assert (mine / OWNER_FILE).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
    assert not mine.exists()


@pytest.fixture(scope="module")
def tiny_tflite(tmp_path_factory, session_exports):
    """A tiny encoder exported for LiteRT, with inputs shaped like the CLI's at --max-length 16."""
    import torch

    from edgeprune.export import export
    from edgeprune.models.classifier import EncoderClassifier
    from tests.conftest import tiny_bert

    model = EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()
    inputs = (torch.randint(1000, 30522, (1, 16)), torch.ones(1, 16, dtype=torch.long))
    return export(model, inputs, tmp_path_factory.mktemp("litert") / "tiny.tflite", "litert-fp32",
                  session_exports).path, inputs


@pytest.mark.integration
def test_benchmark_through_the_real_adb_client(phone, tiny_tflite):
    from edgeprune.bench import benchmark_on

    _, endpoint = phone
    artifact, inputs = tiny_tflite
    with AdbTransport(endpoint, python=sys.executable) as transport:  # a phone would need Termux's python
        result = benchmark_on(transport, artifact, inputs, None, 1, warmup=1, runs=3, device="android-arm64")
    assert result.device == "android-arm64" and result.runtime == "litert" and result.timed_runs == 3
    assert result.file_bytes == artifact.stat().st_size


def test_a_timeout_ends_the_command_on_the_phone_and_removes_its_folder(phone, tmp_path):
    """The peer runs shell commands in this machine's `sh`, as adbd does in the phone's, and like adbd it does
    not end them when the adb client goes away: the transport's second `adb shell` has to."""
    _, endpoint = phone
    marker, pids = unique_marker(), tmp_path / "sleeper.pids"
    try:
        with AdbTransport(endpoint) as transport:
            workdir = transport.workdir
            with pytest.raises(DeviceTimeoutError, match="ran past its 3 s timeout"):
                transport.run(sleeper(marker, pids), timeout_s=3)
        assert pids.exists(), "the command never started on the phone: the test proves nothing"
        assert wait_for(lambda: running_with(marker) == [], 5), "the command and its child still run on the phone"
        assert not Path(workdir).exists()
    finally:
        for pid in running_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_an_unplugged_phone_is_unreachable_in_one_line(phone):
    peer, endpoint = phone
    with AdbTransport(endpoint) as transport:
        assert transport.run(["true"]).exit_code == 0
        peer.stop()
        with pytest.raises(DeviceUnreachableError) as error:
            transport.run(["true"], timeout_s=30)
    assert error.value.exit_code == 5 and "\n" not in str(error.value)


def test_devices_check_through_the_real_adb_client(phone, tmp_path, capsys):
    import json
    import os
    import platform

    from edgeprune.cli import main

    peer, endpoint = phone
    profile = tmp_path / "phone.toml"
    profile.write_text(f"""name = "phone"
description = "the loopback adb peer"
[hardware]
arch = "{platform.machine()}"
cores = {os.cpu_count()}
ram_mb = 1024
[runtime]
name = "litert"
threads = 1
python = "{sys.executable}"
[budgets]
[connection]
kind = "adb"
serial = "{peer.serial}"
adb_port = {endpoint.adb_port}
""")
    assert main(["devices", "check", str(profile)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["connection"] == f"adb device {peer.serial}" and report["ok"] and report["runtimes"]["litert"]


def test_a_native_tool_missing_on_the_phone_is_one_clean_line(phone, tmp_path, tiny_bert_dir, tiny_tflite, capsys):
    """The profile's native runner through the real adb client; the peer has no benchmark_model, as a phone
    before `adb push benchmark_model /data/local/tmp/` has none."""
    from edgeprune.cli import main

    peer, endpoint = phone
    artifact, _ = tiny_tflite  # a real model, so that only the missing tool can fail
    profile = tmp_path / "phone.toml"
    profile.write_text(f"""name = "phone"
description = "the loopback adb peer with native tools"
[hardware]
arch = "aarch64"
cores = 8
ram_mb = 8192
[runtime]
name = "litert"
threads = 4
runner = "native"
benchmark_model = "{tmp_path}/no-such/benchmark_model"
[budgets]
[connection]
kind = "adb"
serial = "REPLACED-BY-THE-FLAG"
""")
    code = main(["bench", str(artifact), "--device", str(profile), "--adb", peer.serial, "--adb-port",
                 str(endpoint.adb_port), "--model", str(tiny_bert_dir), "--max-length", "16", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"cannot run benchmark_model at {tmp_path}/no-such/benchmark_model on adb device {peer.serial}" in err


def test_thermal_state_is_read_through_the_transport(phone):
    """What the native path reads before and after a run: sysfs in one `grep -H` round trip, commands by adb."""
    from edgeprune.bench.native_run import TransportEnvironment

    _, endpoint = phone
    with AdbTransport(endpoint) as transport:
        env = TransportEnvironment(transport, (f"{adb_module.DEVICE_ROOT}/*/zone*/t*",))
        transport.run(["sh", "-c", "mkdir zone0 zone1 && echo 45000 > zone0/temp && echo cpu > zone0/type && "
                                   "echo 51500 > zone1/temp"])
        assert env.files == {}  # nothing there at the first snapshot
        env.refresh()
        root = transport.workdir
        assert env.glob(f"{adb_module.DEVICE_ROOT}/*/zone*") == [f"{root}/zone0", f"{root}/zone1"]
        assert env.read(f"{root}/zone0/temp") == "45000" and env.read(f"{root}/zone1/temp") == "51500"
        assert env.run(["echo", "a b"]) == "a b\n"
