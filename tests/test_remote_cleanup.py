"""A command a transport gives up on (timeout, Ctrl-C) is ended on the device: the guard and stop lines of
edgeprune/devices/transports/base.py, in real shells here, and the local transport's process group. The ssh
and adb transports' own tests run the lines over the real clients (test_ssh_transport.py, test_adb_transport.py)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from edgeprune.devices.transports.base import DeviceTimeoutError, guarded_command, stop_command
from edgeprune.devices.transports.local import LocalEndpoint, LocalTransport
from edgeprune.devices.transports.workdirs import OWNER_FILE, make_remote_workdir_line, parse_made
from tests._device_fixtures import running_with, sleeper, unique_marker, wait_for


def shell(line: str, **options: object) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, timeout=30, **options)


def test_a_guarded_command_keeps_its_output_exit_status_and_environment(tmp_path):
    done = shell(guarded_command(["sh", "-c", 'printf "%s|%s" "$1" "$X"; echo oops >&2; exit 3', "sh", "a 'b'"],
                                 str(tmp_path), ".run-1", {"X": "$HOME `c`"}))
    assert (done.returncode, done.stdout, done.stderr) == (3, "a 'b'|$HOME `c`", "oops\n")
    assert list(tmp_path.iterdir()) == []  # a finished command leaves no bookkeeping behind


def test_stop_ends_the_whole_process_group_of_a_running_command(tmp_path):
    marker, pids = unique_marker(), tmp_path / "pids"
    running = subprocess.Popen(["sh", "-c", guarded_command(sleeper(marker, pids), str(tmp_path), ".run-1")])
    try:
        assert wait_for(pids.exists), "the command did not start"
        child, parent = map(int, pids.read_text().split())
        assert os.getpgid(child) == os.getpgid(parent) == int((tmp_path / ".run-1.pid").read_text().strip()[1:])
        assert shell(stop_command(str(tmp_path), ".run-1")).returncode == 0
        assert running.wait(timeout=10) == 143 and running_with(marker) == []  # 143: TERM was enough
    finally:
        for pid in running_with(marker):
            os.kill(pid, 9)


def test_a_stop_before_the_command_starts_keeps_it_from_starting(tmp_path):
    assert shell(stop_command(str(tmp_path), ".run-1")).returncode == 0
    done = shell(guarded_command(["touch", "ran"], str(tmp_path), ".run-1"))
    assert done.returncode == 143 and not (tmp_path / "ran").exists()


def test_a_stop_for_a_gone_folder_or_a_finished_command_is_quiet(tmp_path):
    assert shell(guarded_command(["true"], str(tmp_path), ".run-1")).returncode == 0
    for folder in (tmp_path, tmp_path / "gone"):
        done = shell(stop_command(str(folder), ".run-1"))
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_without_setsid_the_command_itself_is_recorded_and_stopped(tmp_path):
    """A device without setsid (an old Android toybox): the command is exec'd, so its PID is the one recorded."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("sh", "cat", "rm", "sleep", "kill", "touch"):
        if shutil.which(name):
            (tools / name).symlink_to(shutil.which(name))
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": str(tools)}
    running = subprocess.Popen(["sh", "-c", guarded_command(["sleep", "60"], str(work), ".run-1")], env=env)
    try:
        assert wait_for(lambda: (work / ".run-1.pid").read_text().strip() if (work / ".run-1.pid").exists() else "")
        recorded = int((work / ".run-1.pid").read_text())

        def program() -> bytes:  # the shell writes its PID, then execs the command: on a busy machine, a moment apart
            return Path(f"/proc/{recorded}/cmdline").read_bytes().split(b"\0")[0]

        assert recorded > 0 and wait_for(lambda: program().endswith(b"sleep")), program()
        assert shell(stop_command(str(work), ".run-1"), env=env).returncode == 0
        assert running.wait(timeout=10) == 143
    finally:
        running.kill()


@pytest.mark.parametrize("name", ["run's tag", "$(touch x)"])
def test_tags_and_folders_are_quoted(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    assert shell(guarded_command(["pwd"], str(folder), name)).stdout.strip() == str(folder)
    assert shell(stop_command(str(folder), name)).returncode == 0 and (folder / f"{name}.stop").exists()
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("device_sh", ["dash", "bash", "mksh", "busybox"])
def test_the_lines_work_in_the_shells_of_boards_and_phones(tmp_path, device_sh):
    """dash (Debian, Raspberry Pi OS), bash, mksh (Android's /system/bin/sh), busybox ash (small boards): their
    `kill` builtins disagree on `--` before a negative process group id."""
    if shutil.which(device_sh) is None:
        pytest.skip(f"{device_sh} is not installed (apt-get install {device_sh})")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "sh").symlink_to(shutil.which(device_sh))
    for name in ("setsid", "cat", "rm", "sleep", "env", "touch"):
        (tools / name).symlink_to(shutil.which(name))
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": str(tools)}
    done = shell(guarded_command(["sh", "-c", 'echo "$X"; exit 7'], str(work), ".run-1", {"X": "a b"}), env=env)
    assert (done.returncode, done.stdout) == (7, "a b\n")
    commands = {".run-2": ["sleep", "60"]}
    if device_sh == "busybox":  # ignores TERM, as a stuck native tool might: KILL follows (2 s later)
        commands[".run-3"] = ["sh", "-c", "trap '' TERM; sleep 60"]
    for run, argv in commands.items():
        running = subprocess.Popen([str(tools / "sh"), "-c", guarded_command(argv, str(work), run)], env=env)
        try:
            assert wait_for(lambda run=run: (work / f"{run}.pid").exists())
            group = int((work / f"{run}.pid").read_text().strip()[1:])
            assert shell(stop_command(str(work), run), env=env).returncode == 0
            assert running.wait(timeout=10) in (143, 137)
            assert wait_for(lambda group=group: not group_alive(group), 5)
        finally:
            running.kill()
    assert shell(stop_command(str(work), ".run-4"), env=env).returncode == 0
    assert shell(guarded_command(["touch", "ran"], str(work), ".run-4"), env=env).returncode == 143
    assert not (work / "ran").exists()


def group_alive(group: int) -> bool:
    """Whether a process of the group still runs (zombies waiting for init do not count)."""
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[2] == str(group) and fields[0] != "Z":
            return True
    return False


@pytest.mark.parametrize("stop", ["timeout", "ctrl-c"])
def test_the_local_transport_ends_the_whole_command_too(tmp_path, stop):
    """The host profile's transport: the command and its child go with a timeout or Ctrl-C, and the folder."""
    marker, pids = unique_marker(), tmp_path / "pids"

    def interrupt_once_started() -> None:
        if wait_for(pids.exists):
            os.kill(os.getpid(), signal.SIGINT)

    try:
        with LocalTransport(LocalEndpoint()) as transport:
            workdir = transport.workdir
            if stop == "timeout":
                with pytest.raises(DeviceTimeoutError, match="ran past its 3 s timeout on this machine"):
                    transport.run(sleeper(marker, pids), timeout_s=3)
            else:
                ctrl_c = threading.Thread(target=interrupt_once_started)
                ctrl_c.start()
                with pytest.raises(KeyboardInterrupt):
                    transport.run(sleeper(marker, pids), timeout_s=60)
                ctrl_c.join()
        assert pids.exists(), "the command never started: the test proves nothing"
        assert wait_for(lambda: running_with(marker) == [], 5), "the command or its child still runs"
        assert not os.path.exists(workdir)
    finally:
        for pid in running_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_folder_left_by_a_killed_process_goes_with_the_next_transport_and_a_live_ones_stays(tmp_path,
                                                                                              monkeypatch):
    """SIGKILL leaves no chance to clean up; the next local transport of this user removes what was left."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    make_folder = ("import sys, time; "
                   "from edgeprune.devices.transports.local import LocalEndpoint, LocalTransport; "
                   "t = LocalTransport(LocalEndpoint()); print(t.workdir, flush=True); time.sleep(60)")
    killed = subprocess.Popen([sys.executable, "-c", make_folder], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    living = subprocess.Popen([sys.executable, "-c", make_folder], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        orphan, kept = Path(killed.stdout.readline().strip()), Path(living.stdout.readline().strip())
        killed.kill()
        killed.wait(timeout=10)
        assert orphan.is_dir() and orphan.parent == tmp_path  # SIGKILL: nothing could remove it
        foreign = tmp_path / "edgeprune-bench-by-an-older-version"  # no owner file: not ours to judge
        foreign.mkdir()
        elsewhere = tmp_path / "edgeprune-bench-of-another-host"  # its pids are not this machine's
        elsewhere.mkdir()
        (elsewhere / OWNER_FILE).write_text(f"{killed.pid} {socket.gethostname()}-elsewhere\n")
        assert (orphan / OWNER_FILE).read_text() == f"{killed.pid} {socket.gethostname()}\n"
        with LocalTransport(LocalEndpoint()) as transport:
            mine = Path(transport.workdir)
            assert not orphan.exists()
            assert kept.is_dir() and foreign.is_dir() and elsewhere.is_dir() and mine.is_dir()
        assert not mine.exists()
    finally:
        for process in (killed, living):
            process.kill()
            process.wait(timeout=10)


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait(timeout=10)
    return process.pid


@pytest.mark.parametrize("device_sh", ["dash", "bash", "mksh", "busybox"])
def test_the_remote_work_folder_line_lists_earlier_owners_and_makes_an_owned_folder(tmp_path, device_sh):
    """The line ssh and adb transports run to make a work folder, in the shells of boards and phones."""
    if shutil.which(device_sh) is None:
        pytest.skip(f"{device_sh} is not installed (apt-get install {device_sh})")
    sleeping = subprocess.Popen(["sleep", "60"])
    try:
        folders = {}
        for name, record in (("orphan", f"{dead_pid()} {socket.gethostname()}"),
                             ("running", f"{sleeping.pid} {socket.gethostname()}"),
                             ("elsewhere", f"{dead_pid()} {socket.gethostname()}-elsewhere"),
                             ("older", None)):
            folders[name] = tmp_path / f"edgeprune.{name}"
            folders[name].mkdir()
            if record is not None:
                (folders[name] / OWNER_FILE).write_text(record + "\n")
        argv = [shutil.which(device_sh), *(["sh"] if device_sh == "busybox" else []), "-c"]
        done = subprocess.run([*argv, make_remote_workdir_line(str(tmp_path))], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr
        made, orphans = parse_made(done.stdout)
        assert orphans == [str(folders["orphan"])]  # only the ended process's of this host
        assert made is not None and Path(made).parent == tmp_path and Path(made).name.startswith("edgeprune.")
        assert (Path(made) / OWNER_FILE).read_text() == f"{os.getpid()} {socket.gethostname()}\n"
        assert sum(line.startswith("owner ") for line in done.stdout.splitlines()) == 3  # "older" has no owner file
    finally:
        sleeping.kill()
        sleeping.wait(timeout=10)


def test_a_folder_on_the_device_left_by_a_killed_process_goes_with_the_next_ssh_transport(tmp_path):
    """A fit killed with SIGKILL leaves its folder on the board; the next transport from this machine removes
    it, and leaves a running process's folder, one made from another host and one without an owner file."""
    from edgeprune.devices.transports.ssh import SshTransport
    from edgeprune.serialization import to_jsonable
    from tests.sshd import start_sshd

    server = start_sshd(tmp_path / "sshd")
    endpoint = json.dumps(to_jsonable(server.endpoint()))
    make_folder = ("import json, sys, time; from edgeprune.devices import Endpoint; "
                   "from edgeprune.devices.transports.ssh import SshTransport; "
                   "from edgeprune.serialization import from_jsonable; "
                   "t = SshTransport(from_jsonable(Endpoint, json.loads(sys.argv[1]))); print(t.workdir, flush=True); "
                   "time.sleep(60)")
    killed = subprocess.Popen([sys.executable, "-c", make_folder, endpoint], stdout=subprocess.PIPE, text=True)
    living = subprocess.Popen([sys.executable, "-c", make_folder, endpoint], stdout=subprocess.PIPE, text=True)
    others = [Path(tempfile.mkdtemp(prefix="edgeprune.", dir="/tmp")) for _ in range(2)]  # sshd's sessions: /tmp
    kept = None
    try:
        orphan, kept = Path(killed.stdout.readline().strip()), Path(living.stdout.readline().strip())
        killed.kill()
        killed.wait(timeout=10)
        assert orphan.is_dir() and (orphan / OWNER_FILE).read_text() == f"{killed.pid} {socket.gethostname()}\n"
        (others[0] / OWNER_FILE).write_text(f"{killed.pid} {socket.gethostname()}-elsewhere\n")
        with SshTransport(server.endpoint()) as transport:
            mine = Path(transport.workdir)
            assert not orphan.exists()
            assert kept.is_dir() and all(other.is_dir() for other in others) and mine.is_dir()
        assert not mine.exists()
    finally:
        for process in (killed, living):
            process.kill()
            process.wait(timeout=10)
        for folder in [*others, kept]:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        server.stop()
