"""A Linux board over SSH, with the system `ssh` client: the user's config, agent and keys apply.

Host keys are checked against known_hosts with StrictHostKeyChecking=yes; `trust_on_first_use` switches
to accept-new, which still refuses a changed key, and edgeprune says on stderr when it accepted one.
Files travel as `cat` over the ssh channel, so remote names need only shell quoting (no scp/sftp globbing).
Commands run in a process group of their own (`guarded_command`): killing the local client on a timeout or
Ctrl-C would leave them running on the board, so a second short connection ends the group there.
"""

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from edgeprune.devices.transports.base import (
    MAX_PORT,
    CommandResult,
    DeviceTimeoutError,
    Endpoint,
    Flag,
    Transport,
    bounds,
    guarded_command,
    register,
    shell_command,
    stop_command,
)
from edgeprune.devices.transports.workdirs import make_remote_workdir_line, parse_made, remove_folders_line
from edgeprune.errors import DeviceUnreachableError, EdgepruneError, UserInputError

SSH_FAILED = 255  # ssh's own exit status for connection, authentication and host-key failures
DROPPED = ("connection refused", "connection closed", "connection reset", "closed by remote host",
           "broken pipe", "timed out", "timeout, server", "no route to host", "network is unreachable",
           "kex_exchange_identification", "client_loop", "lost connection", "could not resolve hostname",
           "temporary failure in name resolution")


# what ssh accepts as a user and a host, and nothing a shell or the ssh client would read as more (';', '-o...')
SSH_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,63}")  # all used with fullmatch
HOST_NAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?")
IPV6_ADDRESS = re.compile(r"[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[A-Za-z0-9_.-]+)?")


def check_ssh_target(user: str, host: str, where: str) -> None:
    """Refuse an ssh user or host that ssh would reject or read as an option or shell syntax."""
    if not SSH_USER.fullmatch(user):
        raise UserInputError(f"{where}: user {user!r} is not an ssh user name (letters, digits, '.', '_', '-', '+'; "
                             "not starting with '-')")
    if not (HOST_NAME.fullmatch(host) or IPV6_ADDRESS.fullmatch(host)):
        raise UserInputError(f"{where}: host {host!r} is not a host name or IP address (letters, digits, '.', '-', "
                             "'_'; IPv6 in brackets: user@[::1]:22)")


@dataclass(frozen=True, kw_only=True)
class SshEndpoint(Endpoint):
    """A Linux board over ssh: the user's ssh config, agent and keys apply."""

    kind: str = field(default="ssh", init=False)
    host: str
    user: str
    port: int = field(default=22, metadata=bounds(positive=True, maximum=MAX_PORT))
    key: str | None = field(default=None, metadata=bounds(path=True))  # identity file; None: the config's and agent's
    known_hosts: str | None = field(default=None, metadata=bounds(path=True))  # None: the ssh config's
    trust_on_first_use: bool = False
    connect_timeout_s: float = field(default=10.0, metadata=bounds(positive=True, maximum=3600))

    @property
    def record_key(self) -> str:
        return f"ssh:{self.user}@{self.host}:{self.port}"

    def check(self, where: str) -> None:
        check_ssh_target(self.user, self.host, where)


def parse_target(text: str) -> tuple[str, str, int]:
    """(user, host, port) from USER@HOST[:PORT]; an IPv6 host goes in brackets: USER@[::1]:22."""
    user, at, rest = text.partition("@")
    host, port = rest, "22"
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else port
    elif ":" in rest:
        host, _, port = rest.rpartition(":")
    if not at or not user or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserInputError(f"--ssh {text!r}: expected USER@HOST or USER@HOST:PORT, e.g. pi@pi5.local:22")
    return user, host, int(port)


@register("ssh")
class SshTransport(Transport):
    endpoint_type = SshEndpoint
    flags = (
        Flag("--ssh", "USER@HOST[:PORT]", "reach the device over ssh here instead of the profile's connection",
             selects=True),
        Flag("--identity", "PATH", "ssh private key (default: your ssh config and agent)", type=Path),
        Flag("--trust-on-first-use", "", "accept and record an unknown ssh host key (a changed key is still refused)",
             type=bool),
    )

    @classmethod
    def with_flags(cls, endpoint: Endpoint | None, given: dict) -> Endpoint:
        if given.get("ssh") is not None:
            user, host, port = parse_target(given["ssh"])
            check_ssh_target(user, host, f"--ssh {given['ssh']!r}")
            target = {"user": user, "host": host, "port": port}  # the profile's key, known_hosts and timeout stay
            endpoint = (dataclasses.replace(endpoint, **target) if isinstance(endpoint, SshEndpoint)
                        else SshEndpoint(**target))
        identity = given.get("identity")
        if identity:
            if not identity.expanduser().is_file():
                raise UserInputError(f"--identity {identity} does not exist")
            endpoint = dataclasses.replace(endpoint, key=str(identity.expanduser()))
        if given.get("trust_on_first_use"):
            endpoint = dataclasses.replace(endpoint, trust_on_first_use=True)
        return endpoint

    @property
    def label(self) -> str:
        e = self.endpoint
        return f"{e.user}@{e.host}:{e.port}"

    @property
    def known_hosts(self) -> str:
        """The known_hosts file ssh checks: the profile's, else the first of the user's ssh config."""
        if self.endpoint.known_hosts:
            return self.endpoint.known_hosts
        try:
            config = subprocess.run(["ssh", "-G", *self.ssh_argv()[1:]], stdin=subprocess.DEVNULL,
                                    capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            config = ""
        found = re.search(r"^userknownhostsfile (\S+)", config, re.MULTILINE)
        return found.group(1) if found else "~/.ssh/known_hosts"

    def ssh_argv(self) -> list[str]:
        """The ssh client invocation, up to (not including) the remote command."""
        e = self.endpoint
        if not e.host or not e.user:
            raise UserInputError("an ssh connection needs a host and a user, e.g. --ssh pi@pi5.local")
        argv = ["ssh", "-T", "-p", str(e.port), "-o", "BatchMode=yes", "-o", f"ConnectTimeout={e.connect_timeout_s:g}",
                "-o", f"StrictHostKeyChecking={'accept-new' if e.trust_on_first_use else 'yes'}",
                "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]
        if e.known_hosts:  # a list of files to ssh, so a path with a space goes in double quotes
            argv += ["-o", f'UserKnownHostsFile="{e.known_hosts}"' if " " in e.known_hosts
                     else f"UserKnownHostsFile={e.known_hosts}"]
        if e.key:
            argv += ["-i", e.key]
        return [*argv, "-l", e.user, "--", e.host]

    def _ssh(self, line: str, timeout_s: float, stdin: BinaryIO | None = None, retry: bool = True,
             shown: str | None = None) -> tuple[int, bytes, str]:
        """Run one shell line on the device; one retry if the connection drops, then DeviceUnreachableError.

        `shown` is how a timeout message names the command (default: the line)."""
        stderr = ""
        for _attempt in range(2 if retry else 1):
            if stdin is not None:
                stdin.seek(0)
            try:
                done = subprocess.run([*self.ssh_argv(), line], stdin=stdin or subprocess.DEVNULL,
                                      capture_output=True, timeout=timeout_s)
            except FileNotFoundError:
                raise UserInputError("the ssh client is not installed (apt-get install openssh-client)") from None
            except subprocess.TimeoutExpired:
                command = " ".join((shown or line).split())  # one line, whatever the command holds
                raise DeviceTimeoutError(f"a command on {self.label} ran past its {timeout_s:g} s timeout: "
                                         f"{command[:120]}") from None
            stderr = done.stderr.decode(errors="replace")
            if "Permanently added" in stderr:
                sys.stderr.write(f"edgeprune: trusted the new host key of {self.label} on first use; "
                                 f"it is now in {self.known_hosts}\n")
                stderr = "".join(x for x in stderr.splitlines(True) if "Permanently added" not in x)
            if done.returncode != SSH_FAILED:
                return done.returncode, done.stdout, stderr
            self._refuse_host_key_or_login(stderr)
            if not any(pattern in stderr.lower() for pattern in DROPPED):
                return done.returncode, done.stdout, stderr  # the remote command itself exited 255
        reason = stderr.strip().splitlines()[-1] if stderr.strip() else "no answer"
        tries = "twice" if retry else "once"
        raise DeviceUnreachableError(f"cannot reach {self.label} (tried {tries}): {reason}")

    def _refuse_host_key_or_login(self, stderr: str) -> None:
        e = self.endpoint
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in stderr or "Host key verification failed" in stderr:
            if "HAS CHANGED" in stderr:
                # ssh names the file and the host entry it checked ("Offending ED25519 key in FILE:LINE",
                # "Host key for [HOST]:PORT has changed"), whatever the profile or ~/.ssh/config chose
                offending = re.search(r"^Offending \S+ key in (.+):\d+\s*$", stderr, re.MULTILINE)
                entry = re.search(r"^Host key for (\S+) has changed", stderr, re.MULTILINE)
                known_hosts = offending.group(1) if offending else os.path.expanduser(self.known_hosts)
                host = entry.group(1) if entry else e.host if e.port == 22 else f"[{e.host}]:{e.port}"
                raise DeviceUnreachableError(
                    f"the host key of {self.label} does not match the one in {known_hosts}; refusing to "
                    f"connect (the device was reinstalled, or someone is in between). If you trust the change, "
                    f"remove the old key with: ssh-keygen -f {shlex.quote(known_hosts)} -R {shlex.quote(host)}")
            raise DeviceUnreachableError(
                f"the host key of {self.label} is not in {self.known_hosts}; refusing to connect. Verify it and add "
                f"it (ssh-keyscan -p {e.port} {e.host}), or accept it once with --trust-on-first-use "
                f"(connection.trust_on_first_use = true)")
        if "Permission denied" in stderr:
            raise DeviceUnreachableError(
                f"{self.label} refused the login ({stderr.strip().splitlines()[-1]}); check the key "
                f"(--identity or connection.key), the ssh agent and the device's authorized_keys")

    def _make_workdir(self) -> str:
        timeout_s = self.endpoint.connect_timeout_s + 20
        code, out, err = self._ssh(make_remote_workdir_line('"${TMPDIR:-/tmp}"'), timeout_s)
        printed = out.decode(errors="replace")
        path, orphans = parse_made(printed)
        if code != 0 or path is None:
            raise EdgepruneError(f"cannot make a work folder on {self.label}: {err.strip() or printed.strip()}")
        if orphans:  # left by fits killed on this machine: removed on the way (workdirs)
            self._ssh(remove_folders_line(orphans), timeout_s, retry=False)
        return path

    def push(self, local: Path, name: str | None = None) -> str:
        target = self.remote_path(name or Path(local).name)
        with open(local, "rb") as source:
            code, _, err = self._ssh(f"cat > {shlex.quote(target)}", 3600, stdin=source)
        if code != 0:
            raise EdgepruneError(f"cannot push {local} to {self.label}:{target}: {err.strip()}")
        return target

    def run(self, argv: Sequence[str], timeout_s: float = 600, env: Mapping[str, str] | None = None) -> CommandResult:
        tag = self.next_run_tag()
        line = guarded_command(argv, self.workdir, tag, env)  # the work folder first: its own errors stand
        try:
            code, out, err = self._ssh(line, timeout_s, shown=shell_command(argv, env=env))
        except (DeviceTimeoutError, KeyboardInterrupt):
            self._stop(tag)
            raise
        return CommandResult(code, out.decode(errors="replace"), err)

    def _stop(self, tag: str) -> None:
        """End the guarded command `tag` on the device: the local client is gone, its remote side is not."""
        try:
            self._ssh(stop_command(self.workdir, tag), self.endpoint.connect_timeout_s + 10, retry=False)
        except EdgepruneError as error:  # the device went away: nothing left to end from here
            sys.stderr.write(f"edgeprune: could not stop the command on {self.label}: {error}\n")

    def fetch(self, name: str, local: Path) -> Path:
        code, out, err = self._ssh(f"cat -- {shlex.quote(self.remote_path(name))}", 3600)
        if code != 0:
            raise EdgepruneError(f"cannot fetch {name} from {self.label}: {err.strip()}")
        Path(local).write_bytes(out)
        return Path(local)

    def _remove_workdir(self, path: str) -> None:
        try:
            self._ssh(f"rm -rf -- {shlex.quote(path)}", self.endpoint.connect_timeout_s + 20, retry=False)
        except EdgepruneError as error:  # the device went away: nothing left to clean from here
            sys.stderr.write(f"edgeprune: could not remove {path} on {self.label}: {error}\n")
