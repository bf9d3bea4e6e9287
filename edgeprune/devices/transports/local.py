"""This machine: a temporary folder and subprocesses. Each new work folder first removes the folders of this user
left by processes that were killed (`edgeprune.devices.transports.workdirs`)."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from edgeprune.devices.transports.base import CommandResult, DeviceTimeoutError, Endpoint, Transport, register
from edgeprune.devices.transports.workdirs import OWNER_FILE, orphaned, owner_record
from edgeprune.errors import EdgepruneError

WORKDIR_PREFIX = "edgeprune-bench-"


def remove_orphaned_workdirs(folder: Path) -> list[Path]:
    """Remove this user's work folders in `folder` whose owning process on this host has ended
    (`edgeprune.devices.transports.workdirs`); the ones removed."""
    removed = []
    for candidate in folder.glob(f"{WORKDIR_PREFIX}*"):
        try:
            if candidate.is_symlink() or candidate.stat().st_uid != os.getuid():
                continue
            record = (candidate / OWNER_FILE).read_text()
        except OSError:
            continue
        if orphaned(record):
            shutil.rmtree(candidate, ignore_errors=True)
            removed.append(candidate)
    return removed


@dataclass(frozen=True, kw_only=True)
class LocalEndpoint(Endpoint):
    """This machine: nothing to say about how to reach it."""

    kind: str = field(default="local", init=False)

    @property
    def on_this_machine(self) -> bool:
        return True


@register("local")
class LocalTransport(Transport):
    """Files go to a temporary folder (large artifacts are linked, not copied); commands are subprocesses."""

    endpoint_type = LocalEndpoint

    default_python = sys.executable

    @property
    def label(self) -> str:
        return "this machine"

    def _make_workdir(self) -> str:
        remove_orphaned_workdirs(Path(tempfile.gettempdir()))
        path = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
        (Path(path) / OWNER_FILE).write_text(owner_record() + "\n")
        return path

    def push(self, local: Path, name: str | None = None) -> str:
        target = self.remote_path(name or Path(local).name)
        source = Path(local).resolve()
        if not source.is_file():
            raise EdgepruneError(f"cannot push {local}: not a file")
        Path(target).unlink(missing_ok=True)  # a second push replaces the file, as on a device
        os.symlink(source, target)
        return target

    def run(self, argv: Sequence[str], timeout_s: float = 600, env: Mapping[str, str] | None = None) -> CommandResult:
        """The command runs in a session of its own; a timeout or Ctrl-C ends that whole process group."""
        try:
            process = subprocess.Popen(list(argv), cwd=self.workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       stdin=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})},
                                       start_new_session=True)
        except OSError as error:
            return CommandResult(127, "", f"{argv[0]}: {error}")
        with process:
            try:
                stdout, stderr = process.communicate(timeout=timeout_s)
            except BaseException as stop:  # the timeout, Ctrl-C: what the command started goes with it
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
                if isinstance(stop, subprocess.TimeoutExpired):
                    raise DeviceTimeoutError(f"{argv[0]} ran past its {timeout_s:g} s timeout on {self.label}") \
                        from None
                raise
        return CommandResult(process.returncode, stdout, stderr)

    def fetch(self, name: str, local: Path) -> Path:
        try:
            shutil.copyfile(self.remote_path(name), local)
        except OSError as error:
            raise EdgepruneError(f"cannot fetch {name} from {self.label}: {error}") from None
        return Path(local)

    def _remove_workdir(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)
