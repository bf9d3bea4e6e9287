"""Provision a Linux board for benchmarks: check it, make a virtual environment there, install the runtimes.

`edgeprune devices setup PROFILE` checks the board (arch, OS, Python, free disk and RAM), creates a venv
at the profile's `runtime.env` (default `$HOME/.edgeprune/env` on the board) and installs the runtimes
the profile lists (`runtime.install`, default `runtime.runtimes`, else `runtime.name`) at the versions this
host uses, from the registry the board reaches or, `offline`, from wheels this host downloads for the board's platform
and copies over. A second run finds everything in place and installs nothing. Where the environment is,
is recorded on this host (`environment_record`), so `devices check`, `bench` and `fit` use its python.
"""

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from edgeprune.cache import read_entry, record_file, record_path
from edgeprune.devices.native_tools import build_on_board
from edgeprune.devices.profile import EXECUTOR_RUNNER, DeviceProfile
from edgeprune.devices.transports import Endpoint, Transport, open_transport
from edgeprune.errors import EdgepruneError, UserInputError
from edgeprune.runtimes import RUNTIMES, BoardPackages

SETUP_VERSION = 1
DEFAULT_ENV = "$HOME/.edgeprune/env"  # on the board, when the profile names no runtime.env


def runtime_packages() -> dict[str, BoardPackages]:
    """What a board installs, by package set: each runtime's own, and "<runtime>-native" where its native tool times
    it and needs less (edgeprune/runtimes). Read when used, not at import: reading the registry loads the runtime
    plugins, which may import this module."""
    return {
        **{name: RUNTIMES.get(name).board_packages for name in RUNTIMES},
        **{f"{name}-native": RUNTIMES.get(name).native_board_packages for name in RUNTIMES
           if RUNTIMES.get(name).native_board_packages is not None},
    }


MIN_FREE_RAM_MB = 256
# PyPI's aarch64 torch wheel is a CUDA build: it does not import without NVIDIA's libraries (gigabytes, and
# nothing a Pi can use); the CPU build comes from PyTorch's own index
TORCH_HINT = ("; PyPI's aarch64 torch is a CUDA build: install the CPU one on the board ({python} -m pip install "
              "torch=={torch} --index-url https://download.pytorch.org/whl/cpu) and run setup again")

# runs on the board with its system python3: what a venv needs, and the facts setup checks
CHECK = r"""
import json, os, platform, shutil, sys
facts = {"arch": platform.machine(), "python": platform.python_version(), "os": None, "free_ram_mb": None,
         "emulated": None, "venv": True, "home": os.path.expanduser("~")}
try:
    import ensurepip, venv
except ImportError:
    facts["venv"] = False
try:
    with open("/etc/os-release") as f:
        facts["os"] = dict(l.strip().split("=", 1) for l in f if "=" in l).get("PRETTY_NAME", "").strip('"')
    with open("/proc/meminfo") as f:
        facts["free_ram_mb"] = next(int(l.split()[1]) // 1024 for l in f if l.startswith("MemAvailable:"))
except (OSError, StopIteration):
    pass
try:
    with open("/etc/edgeprune-emulated") as f:
        facts["emulated"] = f.readline().strip() or None
except OSError:
    pass
env = os.path.expandvars(sys.argv[1])
probe = env
while probe and not os.path.isdir(probe):
    probe = os.path.dirname(probe)
facts["env"] = env
facts["free_disk_mb"] = shutil.disk_usage(probe or "/").free // 2**20
print(json.dumps(facts))
"""
# runs with the venv's python: the installed versions of the named distributions
VERSIONS = ("import json, sys\nfrom importlib import metadata\nout = {}\nfor n in sys.argv[1:]:\n"
            "    try:\n        out[n] = metadata.version(n)\n    except metadata.PackageNotFoundError:\n"
            "        out[n] = None\nprint(json.dumps(out))\n")


@dataclass
class SetupReport:
    """What `devices setup` found and did; `installed` is empty when everything was already in place."""

    device: str
    connection: str
    arch: str
    os: str | None
    python: str  # the board's python3 version
    free_disk_mb: int
    free_ram_mb: int | None
    env: str  # the venv's folder on the board
    env_python: str
    runtimes: list[str]
    wanted: dict[str, str]  # distribution -> the host's version
    installed: dict[str, str] = field(default_factory=dict)  # what this run installed
    created_env: bool = False
    offline: bool = False
    import_s: dict[str, float] = field(default_factory=dict)  # runtime -> seconds of its first import there
    install_s: float = 0.0
    emulated: str | None = None  # the board's own word that it is emulated, e.g. by QEMU user mode
    # runtime -> its native tool on the board: path, built (by this run), seconds, backends, kernels
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    version: int = SETUP_VERSION

    @property
    def changed(self) -> bool:
        return bool(self.installed) or self.created_env or any(tool["built"] for tool in self.tools.values())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changed": self.changed}


def host_version(name: str) -> str:
    """The version of `name` installed here, without a local tag (torch's `+cpu` is no PyPI version)."""
    try:
        return metadata.version(name).split("+", 1)[0]
    except metadata.PackageNotFoundError:
        raise UserInputError(f"{name} is not installed on this host, so there is no version to match on the "
                             f"board; install it here first (pip install -e .)") from None


def wanted_versions(runtimes: list[str]) -> dict[str, str]:
    names = [n for r in runtimes for n in (*runtime_packages()[r].with_deps, *runtime_packages()[r].without_deps)]
    return {name: host_version(name) for name in dict.fromkeys(names)}


def pinned(runtimes: list[str], wanted: dict[str, str], with_deps: bool) -> list[str]:
    """`name==version` of the packages of `runtimes` that install with (or without) their dependencies."""
    names = [n for r in runtimes
             for n in (runtime_packages()[r].with_deps if with_deps else runtime_packages()[r].without_deps)]
    return [f"{n}=={wanted[n]}" for n in dict.fromkeys(names)]


def install_runtimes(profile: DeviceProfile) -> list[str]:
    return list(profile.install or profile.searched_runtimes)


def package_sets(profile: DeviceProfile, runtimes: list[str]) -> list[str]:
    """The keys of runtime_packages() for `runtimes` on this board: ExecuTorch timed by the native runner needs
    no torch."""
    return [f"{r}-native" if f"{r}-native" in runtime_packages() and profile.runner_for(r) == "native" else r
            for r in runtimes]


def built_runner_path(profile: DeviceProfile, env: str) -> str | None:
    """Where setup builds the ExecuTorch runner on this board, or None when it times .pte files otherwise (the
    Python runner, or a tool the profile names elsewhere, which setup leaves alone)."""
    if profile.runner_for("executorch") != "native":
        return None
    path = profile.native_binaries.get("executorch")
    default = f"{env}/bin/{EXECUTOR_RUNNER}"
    return default if path is None or path == f"{profile.env}/bin/{EXECUTOR_RUNNER}" else None


def environment_record() -> Path:
    """Where this host records each board's environment (by connection), for check, bench and fit."""
    config = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config"))
    return config / "edgeprune" / "environments.json"


def recorded_python(endpoint: Endpoint) -> str | None:
    """The python of the environment `devices setup` made on this board, if it made one."""
    try:
        records = json.loads(environment_record().read_text())
    except (OSError, ValueError):
        return None
    entry = records.get(endpoint.record_key) if isinstance(records, dict) else None
    return entry.get("python") if isinstance(entry, dict) else None


def device_python(profile: DeviceProfile, endpoint: Endpoint | None = None) -> str | None:
    """The python the runner uses on this device: the profile's `runtime.python` when it names one other than
    plain python3, else the environment `devices setup` recorded, else `runtime.env`'s, else python3."""
    endpoint = endpoint or profile.endpoint
    if profile.python and profile.python != "python3":
        return profile.python
    if endpoint.on_this_machine:
        return profile.python
    if profile.env:
        return f"{profile.env}/bin/python"
    return recorded_python(endpoint) or profile.python


def record_environment(endpoint: Endpoint, report: SetupReport) -> None:
    path = environment_record()
    try:
        records = json.loads(path.read_text())
        records = records if isinstance(records, dict) else {}
    except (OSError, ValueError):
        records = {}
    records[endpoint.record_key] = {"device": report.device, "env": report.env, "python": report.env_python,
                                       "versions": report.wanted, "emulated": report.emulated}
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(records, indent=2) + "\n")
    temporary.replace(path)


def run_python(transport: Transport, python: str, script: str, args: list[str], timeout_s: float) -> Any:
    done = transport.run([python, "-c", script, *args], timeout_s=timeout_s)
    if done.exit_code != 0:
        return None
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def check_board(transport: Transport, profile: DeviceProfile, runtimes: list[str], env: str) -> dict[str, Any]:
    """The board's facts, or UserInputError naming what rules it out."""
    facts = run_python(transport, "python3", CHECK, [env], 120)
    if facts is None:
        raise UserInputError(f"{transport.label} has no working python3; install it (apt install python3 "
                             "python3-venv) and run setup again")
    if facts["arch"] != profile.arch:
        raise UserInputError(f"{transport.label} is {facts['arch']}, the profile {profile.name} says {profile.arch}")
    if tuple(int(p) for p in facts["python"].split(".")[:2]) < (3, 10):
        raise UserInputError(f"{transport.label} has python {facts['python']}; the runtimes need 3.10 or newer")
    if not facts["venv"]:
        raise UserInputError(f"{transport.label} cannot make virtual environments (apt install python3-venv)")
    need = sum(runtime_packages()[r].disk_mb for r in runtimes)
    if facts["free_disk_mb"] < need:
        raise UserInputError(f"{transport.label} has {facts['free_disk_mb']} MB free at {facts['env']}; "
                             f"{', '.join(runtimes)} need about {need} MB")
    if facts["free_ram_mb"] is not None and facts["free_ram_mb"] < MIN_FREE_RAM_MB:
        raise UserInputError(f"{transport.label} has {facts['free_ram_mb']} MB of RAM available; "
                             f"benchmarks need at least {MIN_FREE_RAM_MB} MB")
    return facts


def wheel_platform(arch: str, python: str) -> list[str]:
    """`pip download` options for wheels that install on a glibc Linux board of `arch` with `python`."""
    tag = "".join(python.split(".")[:2])
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in (28, 27, 17)] + [f"manylinux2014_{arch}", f"linux_{arch}"]
    return [*(w for p in platforms for w in ("--platform", p)), "--python-version", python.rsplit(".", 1)[0],
            "--implementation", "cp", "--abi", f"cp{tag}", "--abi", "abi3", "--abi", "none", "--only-binary=:all:"]


def download_wheels(runtimes: list[str], wanted: dict[str, str], arch: str, python: str, cache: Path) -> list[Path]:
    """The wheels for the board, downloaded here into `cache` (kept: a second setup downloads nothing)."""
    pins_key = hashlib.sha256(json.dumps(sorted(wanted.items())).encode()).hexdigest()[:12]
    folder = cache / "wheels" / f"cp{''.join(python.split('.')[:2])}-{arch}-{'-'.join(runtimes)}-{pins_key}"
    folder.mkdir(parents=True, exist_ok=True)
    for wheel in folder.glob("*.whl"):  # one cut off since (a full disk, a hand edit): removed, pip downloads it
        if record_path(wheel).exists():
            read_entry(wheel)
    before = set(folder.glob("*.whl"))
    options = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "-d", str(folder),
               *wheel_platform(arch, python)]
    for deps in (True, False):
        pins = pinned(runtimes, wanted, deps)
        if not pins:
            continue
        done = subprocess.run([*options, *([] if deps else ["--no-deps"]), *pins], capture_output=True, text=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
            reason = errors[-1:] or [done.stderr[-300:]]
            raise EdgepruneError(f"cannot download {arch} wheels for python {python} ({', '.join(pins)}): "
                                 f"{reason[0].strip()}")
    wheels = sorted(folder.glob("*.whl"))
    for wheel in wheels:  # pip writes them whole; a record lets the next setup check them
        if not record_path(wheel).exists():
            record_file(wheel, ("pip",))
    sys.stderr.write(f"edgeprune: {len(set(wheels) - before)} new wheels in {folder} ({len(wheels)} in all)\n")
    return wheels


def setup_device(profile: DeviceProfile, endpoint: Endpoint | None = None, offline: bool = False,
                 cache: Path | None = None, timeout_s: float = 3600) -> SetupReport:
    """Check the board, make its venv and install the profile's runtimes at this host's versions (idempotent)."""
    from edgeprune.tasks.base import default_cache_dir

    endpoint = endpoint or profile.endpoint
    if endpoint.on_this_machine:
        raise UserInputError(f"device {profile.name} is this machine (connection kind = {endpoint.kind!r}); setup is "
                             "for boards: pass --ssh USER@HOST")
    runtimes = install_runtimes(profile)
    packages = package_sets(profile, runtimes)
    wanted = wanted_versions(packages)
    with open_transport(endpoint, "python3") as transport:
        facts = check_board(transport, profile, packages, profile.env or DEFAULT_ENV)
        env = facts["env"]
        python = f"{env}/bin/python"
        report = SetupReport(profile.name, transport.label, facts["arch"], facts["os"], facts["python"],
                             facts["free_disk_mb"], facts["free_ram_mb"], env, python, runtimes, wanted,
                             offline=offline, emulated=facts["emulated"])
        found = run_python(transport, python, VERSIONS, list(wanted), 300) or {}
        missing = {n: v for n, v in wanted.items() if (found.get(n) or "").split("+", 1)[0] != v}
        if missing:
            started = time.monotonic()
            if not found:
                made = transport.run(["python3", "-m", "venv", env], timeout_s=600)
                if made.exit_code != 0:
                    raise EdgepruneError(f"cannot make a venv at {env} on {transport.label}: "
                                         f"{made.stderr.strip()[-300:]}")
                report.created_env = True
            sources = ["--no-index", "--find-links", transport.workdir] if offline else []
            if offline:
                wheels = download_wheels(packages, wanted, facts["arch"], facts["python"], cache or default_cache_dir())
                for wheel in wheels:
                    transport.push(wheel)
            for deps in (True, False):
                pins = pinned(packages, wanted, deps)
                if not pins:
                    continue
                # nice: on a board that also serves other work, the install yields to it
                done = transport.run(["nice", "-n", "10", python, "-m", "pip", "install", "--quiet",
                                      "--disable-pip-version-check", *sources, *([] if deps else ["--no-deps"]), *pins],
                                     timeout_s=timeout_s)
                if done.exit_code != 0:
                    tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
                    raise EdgepruneError(f"pip install on {transport.label} failed (exit {done.exit_code}): {tail}")
            report.install_s = round(time.monotonic() - started, 1)
            report.installed = dict(missing)
            for runtime, package in zip(runtimes, packages, strict=True):
                if not runtime_packages()[package].imports:
                    continue
                started = time.monotonic()
                loaded = transport.run([python, "-c", runtime_packages()[package].imports], timeout_s=600)
                if loaded.exit_code != 0:
                    tail = " | ".join(loaded.stderr.strip().splitlines()[-1:])[-300:]
                    hint = TORCH_HINT.format(python=python, torch=wanted.get("torch")) if "libcu" in tail else ""
                    raise EdgepruneError(f"{runtime} was installed on {transport.label} but does not load: "
                                         f"{tail}{hint}")
                report.import_s[runtime] = round(time.monotonic() - started, 1)
        runner = built_runner_path(profile, env) if "executorch" in runtimes else None
        if runner is not None:
            report.tools["executorch"] = asdict(build_on_board(transport, python, runner, wanted["executorch"],
                                                               timeout_s))
    record_environment(endpoint, report)
    return report


def describe(report: SetupReport) -> str:
    """The lines `devices setup` prints for people."""
    where = (f"{report.device} at {report.connection}: {report.arch}, {report.os or 'unknown OS'}, "
             f"python {report.python}")
    lines = [where + (f", {report.emulated}" if report.emulated else ""),
             f"free: {report.free_disk_mb} MB disk, {report.free_ram_mb} MB RAM; environment: {report.env}"]
    if not report.changed:
        lines.append(f"nothing to do: {', '.join(f'{n} {v}' for n, v in report.wanted.items())} already installed")
    else:
        source = "from wheels copied from this host" if report.offline else "from the board's package index"
        lines.append(f"installed {source} in {report.install_s:g} s: "
                     f"{', '.join(f'{n} {v}' for n, v in report.installed.items())}")
        lines += [f"first import of {r}: {s:g} s" for r, s in report.import_s.items()]
    for runtime, tool in report.tools.items():
        state = f"built on the board in {tool['seconds']:g} s" if tool["built"] else "in place"
        lines.append(f"{runtime} runner {tool['path']}: {state}; loads {', '.join(tool['backends'])} and "
                     f"{tool['kernels']} kernels")
    lines.append(f"devices check, bench and fit now run {shlex.quote(report.env_python)} on this board")
    return "\n".join(lines)
