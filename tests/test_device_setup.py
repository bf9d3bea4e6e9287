"""`devices setup` without a board: which python a device runs, the host-side record of its environment, the wheel
platform for a board, and the user errors. The set-up itself runs on the emulated board (test_emulated_board.py)."""

import dataclasses
import json

import pytest

from edgeprune.cli import main
from edgeprune.devices import load_profile
from edgeprune.devices.setup import (
    SetupReport,
    built_runner_path,
    device_python,
    host_version,
    package_sets,
    pinned,
    record_environment,
    recorded_python,
    wanted_versions,
    wheel_platform,
)
from edgeprune.devices.transports.adb import AdbEndpoint
from edgeprune.devices.transports.ssh import SshEndpoint

BOARD = SshEndpoint(host="pi5.local", user="pi", port=22)


def report(env: str) -> SetupReport:
    return SetupReport("pi5", "pi@pi5.local:22", "aarch64", "Debian GNU/Linux 12 (bookworm)", "3.11.2", 9000, 4000,
                       env, f"{env}/bin/python", ["litert"], {"ai-edge-litert": "2.3.0", "numpy": "2.4.6"})


def test_the_recorded_environment_is_the_python_of_that_board_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    pi5 = load_profile("pi5")
    assert device_python(pi5, BOARD) == "python3"  # nothing recorded: the profile's
    record_environment(BOARD, report("/home/pi/.edgeprune/env"))
    record_environment(dataclasses.replace(BOARD, host="other"), report("/opt/env"))
    saved = json.loads((tmp_path / "edgeprune" / "environments.json").read_text())
    assert set(saved) == {"ssh:pi@pi5.local:22", "ssh:pi@other:22"}
    assert recorded_python(BOARD) == device_python(pi5, BOARD) == "/home/pi/.edgeprune/env/bin/python"
    assert device_python(pi5, dataclasses.replace(BOARD, port=2222)) == "python3"  # another board
    explicit = dataclasses.replace(pi5, python="/usr/local/bin/python3.12")
    assert device_python(explicit, BOARD) == "/usr/local/bin/python3.12"  # a profile's own path wins


def test_a_profile_env_names_the_python_and_a_broken_record_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    (tmp_path / "edgeprune").mkdir()
    (tmp_path / "edgeprune" / "environments.json").write_text("{not json")
    board = load_profile("pi5-emulated")
    assert device_python(board) == "/home/pi/.edgeprune/env/bin/python" and recorded_python(board.endpoint) is None
    assert AdbEndpoint(serial="R58M").record_key == "adb:R58M" and BOARD.record_key == "ssh:pi@pi5.local:22"


def test_wheels_for_a_board_are_its_platform_and_python_and_this_hosts_versions():
    options = wheel_platform("aarch64", "3.11.2")
    assert options[options.index("--python-version") + 1] == "3.11" and "cp311" in options
    assert "manylinux_2_28_aarch64" in options and "--only-binary=:all:" in options
    assert not any("x86_64" in option for option in options)
    from importlib import metadata

    versions = wanted_versions(["litert"])
    assert versions == {"ai-edge-litert": metadata.version("ai-edge-litert"), "numpy": metadata.version("numpy")}
    assert "+" not in wanted_versions(["executorch"])["torch"]  # torch's local tag (+cpu) is no PyPI version


def test_a_board_that_runs_pte_files_natively_installs_the_executorch_wheel_alone_and_builds_its_runner():
    board = load_profile("pi5-emulated")
    keys = package_sets(board, ["litert", "executorch"])
    assert keys == ["litert", "executorch-native"]
    assert pinned(keys, wanted_versions(keys), with_deps=False) == [f"executorch=={host_version('executorch')}"]
    assert "torch" not in wanted_versions(keys)  # the runner links the wheel's own libraries, never libtorch
    assert built_runner_path(board, "/home/pi/.edgeprune/env") == "/home/pi/.edgeprune/env/bin/executor_runner"
    pi5 = load_profile("pi5")  # the Python runner: ExecuTorch's bindings, with torch
    assert package_sets(pi5, ["executorch"]) == ["executorch"] and built_runner_path(pi5, "/e") is None
    named = dataclasses.replace(board, native_binaries={"executorch": "/opt/et/executor_runner"})
    assert built_runner_path(named, "/home/pi/.edgeprune/env") is None  # a tool of the user's own: left alone


@pytest.mark.parametrize(("argv", "message"), [
    (["devices", "setup", "host"], "is this machine (connection kind = 'local'); setup is for boards"),
    (["devices", "check", "host", "--offline"], "No such option '--offline'"),
    (["devices", "setup"], "Missing argument 'NAME'"),
])
def test_setup_user_errors_are_one_line_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
