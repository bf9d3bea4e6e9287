"""An emulated arm64 board: a Debian bookworm arm64 root run by QEMU user mode, reached only over SSH.

It stands in for a Raspberry Pi 5 running Raspberry Pi OS (64-bit, itself Debian bookworm) in tests and
demos. Nothing in it is a mock: its sshd, shell, Python and whatever `edgeprune devices setup` installs
are Debian's and PyPI's aarch64 builds, executed on this x86_64 host by `qemu-aarch64-static` through
binfmt_misc. Timings measured on it describe QEMU's translation, not a Pi: every figure measured there
is labelled `EMULATION_LABEL` (the root carries it in `MARKER`, which `probe_device` reads).

    python -m edgeprune.devices.emulated_board build|start|stop|status   (or `make board`, `make board-stop`)

The root is built once with debootstrap and cached under the edgeprune cache folder, named by a hash
of its recipe (suite, variant, packages, set-up steps), so it is rebuilt only when missing or when the
recipe changes. Building and starting need root (debootstrap, chroot, mounts, binfmt_misc).
"""

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

EMULATION_LABEL = "emulated (QEMU user mode on x86_64)"
MARKER = "/etc/edgeprune-emulated"  # inside the root: the board says what it is to any probe
BOARD_USER = "pi"  # as on Raspberry Pi OS
DEFAULT_PORT = 2222  # `make board` and devices/pi5-emulated.toml; tests pick a free port
RECIPE = {
    "version": 2,  # bump when the set-up steps in `build` change
    "suite": "bookworm",
    "variant": "minbase",
    "mirror": "http://deb.debian.org/debian",
    # python3-venv brings ensurepip's pip wheel; procps gives the board `ps`, as Raspberry Pi OS has; g++ builds
    # the ExecuTorch runner from the executorch wheel's libraries (`devices setup`), as on a Pi with build tools
    "packages": ["python3", "python3-venv", "openssh-server", "procps", "g++"],
    "user": BOARD_USER,
}
QEMU = "/usr/bin/qemu-aarch64-static"
# The CPU QEMU emulates for everything the board runs (its sshd, and every session through sshd's SetEnv): a Pi 5's
# Cortex-A76. QEMU's default, "max", also has i8mm and SVE, which no Pi has; XNNPACK then runs its i8mm kernels, and
# under QEMU 7.2 those gave wrong prefill logits for int4 programs (SmolLM2's first greedy token wrong; one-token
# decode steps, and every other CPU model, right: docs/FINDINGS.md).
BOARD_CPU = "cortex-a76"
BINFMT = Path("/proc/sys/fs/binfmt_misc")
# the register line Debian's qemu-user-static uses; F: the kernel opens the interpreter now, so it works in a chroot
BINFMT_ENTRY = (r":qemu-aarch64:M::\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
                r":\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
                f":{QEMU}:F")
# /proc for the runner's memory figures and ps, /dev for python and ssh. Not /sys: with both the host's CPU lists
# there and its x86 /proc/cpuinfo, the cpuinfo library in LiteRT's aarch64 wheel crashes (SIGSEGV) under QEMU 7.2
# as the interpreter is made. (Measured here: a 3 KB .tflite crashed with /sys mounted and ran without.)
MOUNTS = ("proc", "dev")
# Without /sys, cpuinfo says "failed to parse both lists of possible and present processors": LiteRT runs on, but
# ExecuTorch's XNNPACK backend fails to initialise (status 5) and the runner segfaults. So the root gets the two
# CPU lists a board's kernel shows, as plain files (`write_cpu_lists`); with them both runtimes run.
CPU_LISTS = ("sys/devices/system/cpu/possible", "sys/devices/system/cpu/present")


class BoardError(RuntimeError):
    """The board cannot be built or started here (no root, no qemu, no network for debootstrap...)."""


def recipe_hash() -> str:
    return hashlib.sha256(json.dumps(RECIPE, sort_keys=True).encode()).hexdigest()[:12]


def cache_dir() -> Path:
    return Path(os.environ.get("EDGEPRUNE_CACHE", Path.home() / ".cache" / "edgeprune"))


def board_dir() -> Path:
    """Where the board's keys, state and logs live (the root is beside it, named by its recipe)."""
    return cache_dir() / "board"


def root_dir() -> Path:
    return cache_dir() / "boards" / f"bookworm-arm64-{recipe_hash()}"


def log(message: str) -> None:
    print(f"board: {message}", file=sys.stderr, flush=True)


def run(argv: list[str], **options: object) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, check=True, **options)
    except FileNotFoundError as error:
        raise BoardError(f"{argv[0]} is not installed (make test-board installs qemu-user-static, binfmt-support "
                         f"and debootstrap): {error}") from None
    except subprocess.CalledProcessError as error:
        output = error.stderr or error.stdout or b""
        text = output.decode(errors="replace") if isinstance(output, bytes) else str(output)
        raise BoardError(f"{' '.join(argv[:3])} ... failed (exit {error.returncode}): {text.strip()[-600:]}") from None


def ensure_binfmt() -> None:
    """binfmt_misc mounted and qemu-aarch64 registered with the F flag, so arm64 ELF files run anywhere."""
    if not (BINFMT / "register").exists():
        run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], capture_output=True)
    entry = BINFMT / "qemu-aarch64"
    if not entry.exists() and shutil.which("update-binfmts"):
        subprocess.run(["update-binfmts", "--enable", "qemu-aarch64"], capture_output=True)
    if not entry.exists():
        if not Path(QEMU).exists():
            raise BoardError(f"{QEMU} is missing: apt-get install qemu-user-static")
        (BINFMT / "register").write_text(BINFMT_ENTRY)
    text = entry.read_text()
    if not text.startswith("enabled"):
        entry.write_text("1")
    if "flags: " not in text or "F" not in text.split("flags: ", 1)[1].split("\n", 1)[0]:
        raise BoardError(f"{entry} is registered without the F flag; arm64 programs would not run in a chroot")


def chroot(root: Path, command: str, timeout_s: float = 1800) -> subprocess.CompletedProcess:
    return run(["chroot", str(root), "/bin/sh", "-c", command], capture_output=True, timeout=timeout_s)


def build(force: bool = False) -> dict[str, float]:
    """Build the arm64 root if it is missing (or `force`); return the seconds each step took (empty if cached).
    One build at a time: a second caller waits for the first and finds the root built."""
    root = root_dir()
    if (root / MARKER.lstrip("/")).exists() and not force:
        return {}
    if os.geteuid() != 0:
        raise BoardError("building the board needs root (debootstrap, chroot)")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / MARKER.lstrip("/")).exists() and not force:
            return {}
        return build_locked(root)


def build_locked(root: Path) -> dict[str, float]:
    ensure_binfmt()
    partial = root.with_name(root.name + ".partial")
    if partial.exists():
        remove_root(partial)
    partial.parent.mkdir(parents=True, exist_ok=True)
    costs: dict[str, float] = {}
    started = time.monotonic()
    log(f"debootstrap --arch=arm64 {RECIPE['suite']} into {partial} (several minutes under QEMU)")
    run(["nice", "-n", "10", "debootstrap", "--arch=arm64", f"--variant={RECIPE['variant']}",
         f"--include={','.join(RECIPE['packages'])}", RECIPE["suite"], str(partial), RECIPE["mirror"]],
        capture_output=True)
    costs["debootstrap_s"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    chroot(partial, f"id {BOARD_USER} >/dev/null 2>&1 || useradd --create-home --shell /bin/bash {BOARD_USER}; "
                    # '*': no password to log in with, yet not locked ('!'), which sshd refuses even for keys
                    f"usermod -p '*' {BOARD_USER}; "
                    "mkdir -p /run/sshd; apt-get clean; rm -f /etc/ssh/ssh_host_*")
    (partial / MARKER.lstrip("/")).write_text(EMULATION_LABEL + "\n")
    costs["configure_s"] = round(time.monotonic() - started, 1)
    (partial / "etc" / "edgeprune-board-build.json").write_text(json.dumps({"recipe": RECIPE, "costs": costs}))
    if root.exists():
        remove_root(root)
    partial.rename(root)
    for old in root.parent.glob("bookworm-arm64-*"):  # roots of earlier recipes: gone, unless a board runs there
        if old != root and old.is_dir() and not old.name.endswith(".partial") and not processes_in(old):
            try:
                remove_root(old)
            except BoardError as error:
                log(f"kept {old}: {error}")
    return costs


def remove_root(root: Path) -> None:
    """Delete an old or half-built root, never through a mount (a bind of /dev would take the host's with it)."""
    unmount(root)
    prefix = str(root.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        inside = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    if inside:
        raise BoardError(f"{root} still has mounts ({', '.join(inside)}); unmount them, then build again")
    shutil.rmtree(root)


def is_mount(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


def mount_system(root: Path) -> None:
    for name in MOUNTS:
        target = root / name
        if not is_mount(target):
            kind = ["-t", "proc", "proc"] if name == "proc" else ["--rbind", f"/{name}"]
            run(["mount", *kind, str(target)], capture_output=True)
            if name != "proc":
                subprocess.run(["mount", "--make-rslave", str(target)], capture_output=True)


def write_cpu_lists(root: Path) -> None:
    """The board's /sys/devices/system/cpu/possible and present, "0-N" for the CPUs QEMU user mode shows (this
    host's), as plain files in the root's own /sys folder (see CPU_LISTS)."""
    if is_mount(root / "sys"):
        raise BoardError(f"{root / 'sys'} is a mount; unmount it (the board runs without the host's /sys)")
    last = (os.cpu_count() or 1) - 1
    for name in CPU_LISTS:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"0-{last}\n" if last else "0\n")


def unmount(root: Path) -> None:
    for name in ("proc", "sys", "dev"):  # also what an older recipe mounted
        target = root / name
        if target.exists() and is_mount(target):
            subprocess.run(["umount", "-R", "-l", str(target)], capture_output=True)


@dataclass
class Board:
    """A started board: where its sshd listens and the client files that reach it."""

    root: str
    port: int
    user: str
    identity: str  # the authorized test key (private half)
    known_hosts: str  # holds the board's fresh host key, for strict checking
    pid: int  # sshd, the leader of its own process group
    label: str = EMULATION_LABEL

    @property
    def target(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"


def keygen(path: Path) -> str:
    for old in (path, path.with_suffix(".pub")):
        old.unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "edgeprune-board", "-f", str(path)], capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


def start(port: int = DEFAULT_PORT, folder: Path | None = None, timeout_s: float = 120) -> Board:
    """Start the board's own (arm64) sshd on 127.0.0.1:`port` with a fresh host key and an authorized test key."""
    root = root_dir()
    if not (root / MARKER.lstrip("/")).exists():
        raise BoardError(f"the board is not built ({root}); run: python -m edgeprune.devices.emulated_board build")
    folder = folder or board_dir()
    folder.mkdir(parents=True, exist_ok=True)
    ensure_binfmt()
    mount_system(root)
    write_cpu_lists(root)
    host_public = keygen(folder / "host_key")
    client_public = keygen(folder / "id_ed25519")
    # per port: two boards on one root (make board, and a test) keep their own host key and authorized key
    etc_ssh = root / "etc" / "ssh"
    host_key, authorized, config = (f"edgeprune_{kind}_{port}" for kind in ("host_key", "authorized_keys", "sshd"))
    shutil.copy(folder / "host_key", etc_ssh / host_key)
    os.chmod(etc_ssh / host_key, 0o600)
    (etc_ssh / authorized).write_text(client_public + "\n")
    os.chmod(etc_ssh / authorized, 0o644)
    (root / "run" / "sshd").mkdir(parents=True, exist_ok=True)
    (etc_ssh / config).write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey /etc/ssh/{host_key}", "PidFile none",
        f"AuthorizedKeysFile /etc/ssh/{authorized}", "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "UsePAM no", "PermitRootLogin no", "X11Forwarding no", "PrintMotd no",
        "LogLevel ERROR", f"SetEnv QEMU_CPU={BOARD_CPU}", "",
    ]))
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(host_public.split()[:2])}\n")
    log_file = open(folder / "sshd.log", "w")  # noqa: SIM115 - sshd keeps writing to it
    process = subprocess.Popen(["chroot", str(root), "/usr/sbin/sshd", "-D", "-e", "-f",
                                f"/etc/ssh/{config}"], stdout=log_file, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, start_new_session=True,
                               env={**os.environ, "QEMU_CPU": BOARD_CPU})
    log_file.close()
    board = Board(str(root), port, BOARD_USER, str(folder / "id_ed25519"), str(folder / "known_hosts"), process.pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BoardError(f"the board's sshd exited with {process.returncode}: {(folder / 'sshd.log').read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.2)
    else:
        stop(board)
        raise BoardError(f"the board's sshd did not listen on 127.0.0.1:{port} within {timeout_s:g} s")
    (folder / "board.json").write_text(json.dumps(asdict(board)))
    return board


def processes_in(root: Path) -> list[int]:
    """The host PIDs of every process whose root directory is `root`: all that runs on the board."""
    target, found = str(root.resolve()), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "root") == target:
                    found.append(int(entry.name))
            except OSError:
                continue  # gone, or not ours to read
    return found


def stop(board: Board) -> None:
    """Stop the board's sshd and every session it forked; unmount /proc, /sys and /dev when nothing else runs in
    the root (another board on the same root, or a command orphaned on this one, keeps them)."""
    import psutil

    try:
        leader = psutil.Process(board.pid)
        family = [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for process in family:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(family, timeout=5)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    if not processes_in(Path(board.root)):
        unmount(Path(board.root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edgeprune.devices.emulated_board", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["build", "start", "stop", "status"])
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--rebuild", action="store_true", help="build: rebuild even if the cached root exists")
    args = parser.parse_args(argv)
    state = board_dir() / "board.json"
    try:
        if args.action == "build":
            costs = build(force=args.rebuild)
            print(json.dumps({"root": str(root_dir()), "built_now": bool(costs), **costs}))
        elif args.action == "start":
            costs = build()
            if costs:
                print(json.dumps({"root": str(root_dir()), **costs}))
            board = start(args.port)
            print(f"board: {EMULATION_LABEL} listening on 127.0.0.1:{board.port}; try: ssh -i {board.identity} "
                  f"-o UserKnownHostsFile={board.known_hosts} -p {board.port} {board.user}@127.0.0.1 uname -m\n"
                  f"then: edgeprune devices setup pi5-emulated --offline")
        elif args.action == "stop":
            if state.exists():
                stop(Board(**json.loads(state.read_text())))
                state.unlink()
            print("board: stopped")
        else:
            running = state.exists() and processes_in(root_dir())
            print(json.dumps({"root": str(root_dir()), "built": (root_dir() / MARKER.lstrip("/")).exists(),
                              "running": bool(running), **(json.loads(state.read_text()) if running else {})}))
    except BoardError as error:
        print(f"board: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
