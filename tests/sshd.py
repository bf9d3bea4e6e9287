"""A real OpenSSH server on 127.0.0.1 for the transport tests, with throwaway keys and known_hosts.

Nothing of the machine's /etc/ssh or ~/.ssh is read or changed: sshd runs with `-f` a config in a
temporary folder, its own host key and authorized_keys; the client gets an identity and a known_hosts
file from the same folder through the device's SshEndpoint.
"""

import getpass
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from edgeprune.devices.transports.ssh import SshEndpoint

INSTALL_HINT = ("sshd (openssh-server) is not installed: run `make test`, which installs openssh-server, "
                "openssh-client and adb with apt-get, or install them yourself")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgeprune-test", "-f", str(path)],
                   check=True, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class Sshd:
    folder: Path
    port: int
    user: str
    identity: Path
    known_hosts: Path
    host_public_key: str
    process: subprocess.Popen

    def endpoint(self, **overrides: object) -> SshEndpoint:
        options = dict(host="127.0.0.1", user=self.user, port=self.port, key=str(self.identity),
                       known_hosts=str(self.known_hosts), connect_timeout_s=5.0)
        options.update(overrides)
        return SshEndpoint(**options)

    def connection_toml(self) -> str:
        """The keys of a [connection] table that reach this server (a profile's, or a board's in boards.toml)."""
        return (f'kind = "ssh"\nhost = "127.0.0.1"\nuser = "{self.user}"\nport = {self.port}\n'
                f'key = "{self.identity}"\nknown_hosts = "{self.known_hosts}"\nconnect_timeout_s = 5\n')

    def write_profile(self, folder: Path, name: str = "loopback-board", threads: int = 1) -> Path:
        """A device profile of this machine reached through this server, its runner this interpreter."""
        path = folder / f"{name}.toml"
        path.write_text(f"""name = "{name}"
description = "this machine behind a test sshd"
[hardware]
arch = "{platform.machine()}"
cores = {os.cpu_count()}
ram_mb = 1024
[runtime]
name = "executorch"
threads = {threads}
python = "{sys.executable}"
[budgets]
[connection]
{self.connection_toml()}""")
        return path

    def kill(self) -> None:
        """Kill the listener and every session it forked, as a crashed or powered-off board would."""
        try:
            parent = psutil.Process(self.process.pid)
            children = parent.children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        self.process.kill()
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()

    def log(self) -> str:
        return (self.folder / "sshd.log").read_text(errors="replace")


def start_sshd(folder: Path) -> Sshd:
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if sshd is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    folder.mkdir(parents=True, exist_ok=True)
    host_public = keygen(folder / "host_key")
    client_public = keygen(folder / "id_client")
    (folder / "authorized_keys").write_text(client_public + "\n")
    port = free_port()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_public.split()[:2])}\n")
    try:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # the privilege-separation folder sshd insists on
    except PermissionError:
        pass
    config = folder / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {folder / 'host_key'}",
        f"PidFile {folder / 'sshd.pid'}", f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        "PermitRootLogin yes", "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "X11Forwarding no",
        "PrintMotd no", "LogLevel ERROR", "",
    ]))
    log = open(folder / "sshd.log", "w")  # noqa: SIM115 - sshd keeps writing to it
    process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    log.close()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"sshd exited with {process.returncode}: {(folder / 'sshd.log').read_text()}", pytrace=False)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.05)
    else:
        process.kill()
        pytest.fail(f"sshd did not listen on 127.0.0.1:{port}: {(folder / 'sshd.log').read_text()}", pytrace=False)
    return Sshd(folder, port, getpass.getuser(), folder / "id_client", folder / "known_hosts", host_public, process)
