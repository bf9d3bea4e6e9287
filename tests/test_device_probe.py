"""`probe_device` as a Python user calls it: this machine through the local transport and through the loopback
sshd, a report that names what differs from the profile, and the JSON `edgeprune devices check` prints."""

import dataclasses
import json
import os
import platform
import sys

import pytest

from edgeprune.cli import main
from edgeprune.devices import DeviceReport, load_profile, probe_device
from edgeprune.errors import DeviceUnreachableError
from tests.sshd import free_port, start_sshd

KEYS = ["device", "connection", "arch", "cores", "ram_mb", "python", "python_path", "numpy", "runtimes", "sensors",
        "emulated", "tools", "ok", "problems"]


def this_machine(**changes):
    """The bundled host profile made true of this machine (its file says 2 cores, x86_64)."""
    facts = {"arch": platform.machine(), "cores": os.cpu_count(), "python": sys.executable, **changes}
    return dataclasses.replace(load_profile("host"), **facts)


def assert_this_machine(report: DeviceReport):
    assert report.arch == platform.machine() and report.cores == os.cpu_count() and report.ram_mb > 0
    assert report.python == platform.python_version() and report.python_path == sys.executable
    assert report.numpy is not None and report.runtimes["executorch"] is not None
    assert report.emulated is None  # an x86_64 userland on an x86 CPU is no emulation
    assert set(report.sensors["power"]) == {"battery", "ina3221", "rapl", "tegrastats", "vcgencmd"}
    assert all(text.startswith(("readable: ", "unavailable: ")) for text in report.sensors["power"].values())


def test_this_machine_through_the_local_transport():
    report = probe_device(this_machine())
    assert report.device == "host" and report.connection == "this machine"
    assert_this_machine(report)
    assert report.ok and report.problems == [] and report.tools == {}  # host times everything with runner.py
    assert list(report.to_dict()) == KEYS and report.to_dict()["ok"] is True


def test_what_differs_from_the_profile_is_listed_and_nothing_is_printed(capfd):
    report = probe_device(this_machine(arch="riscv64", cores=999))
    assert not report.ok and report.to_dict()["ok"] is False
    assert report.problems == [f"arch is {platform.machine()}, the profile says riscv64",
                               f"{os.cpu_count()} cores online, the profile says 999"]
    assert capfd.readouterr() == ("", "")  # the CLI prints; the probe only measures


def test_a_profile_python_that_is_not_there_is_a_problem_not_an_error(tmp_path):
    missing = str(tmp_path / "no-python")
    report = probe_device(this_machine(python=missing))
    assert report.python is None and report.python_path is None and report.numpy is None
    assert report.runtimes == {"executorch": None, "litert": None}
    assert report.problems == [f"no working python at {missing} (set runtime.python in the profile)"]


def test_devices_check_prints_the_report_as_json_and_the_problems_on_stderr(tmp_path, capsys):
    profile = tmp_path / "skewed.toml"
    profile.write_text(f"""
name = "skewed"
description = "this machine, with a core count it does not have"
[hardware]
arch = "{platform.machine()}"
cores = {os.cpu_count() + 1}
ram_mb = 1024
[runtime]
name = "executorch"
threads = 1
python = "{sys.executable}"
[budgets]
[connection]
kind = "local"
""")
    assert main(["devices", "check", str(profile)]) == 1
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert list(printed) == KEYS and printed["ok"] is False and printed["device"] == "skewed"
    assert printed["problems"] == [f"{os.cpu_count()} cores online, the profile says {os.cpu_count() + 1}"]
    assert err == f"edgeprune: skewed: {printed['problems'][0]}\n"
    expected = probe_device(load_profile(str(profile))).to_dict()
    assert {key: printed[key] for key in KEYS if key != "ram_mb"} == {
        key: expected[key] for key in KEYS if key != "ram_mb"}


def test_the_endpoint_overrides_the_profile_connection(tmp_path):
    server = start_sshd(tmp_path / "sshd")
    try:
        report = probe_device(this_machine(), server.endpoint())
    finally:
        server.stop()
    assert report.device == "host" and report.connection == f"{server.user}@127.0.0.1:{server.port}"
    assert_this_machine(report)
    assert report.ok


def test_an_unreachable_device_raises_device_unreachable():
    profile = load_profile("pi5")
    endpoint = dataclasses.replace(profile.endpoint, host="127.0.0.1", port=free_port(), connect_timeout_s=5.0)
    with pytest.raises(DeviceUnreachableError, match="cannot reach .*127.0.0.1"):
        probe_device(profile, endpoint)
