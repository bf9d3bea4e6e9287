"""What a device is, as it answers over its connection: arch, cores, RAM, python, runtimes and the energy and
thermal sensors a benchmark would read; and where that differs from its profile. Measures, decides nothing."""

import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from edgeprune.devices.profile import DeviceProfile
from edgeprune.devices.transports import Endpoint, Transport, open_transport
from edgeprune.errors import EdgepruneError, UserInputError
from edgeprune.runtimes import RUNTIMES

PROBE_HEAD = """import json, sys
from importlib import metadata
def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            pass
versions = {"python": sys.version.split()[0], "numpy": version("numpy")}
"""


def probe_script() -> str:
    """What runs on the device with only its python: versions by distribution name (each runtime's, as its
    descriptor in edgeprune/runtimes names them), nothing imported. Built when used: reading the registry loads the
    runtime plugins, which may import this module."""
    return PROBE_HEAD + "".join(f"versions[{name!r}] = version(*{RUNTIMES.get(name).probe_distributions!r})\n"
                                for name in RUNTIMES) + "print(json.dumps(versions))\n"


# The board's word first (the emulated board writes /etc/edgeprune-emulated); else a non-x86 userland on an x86 CPU
# (/proc/cpuinfo is the host kernel's under QEMU user mode, whatever uname -m says), which no real arm board shows.
EMULATION_CHECK = ("e=$(head -n 1 /etc/edgeprune-emulated 2>/dev/null); "
                   "if [ -z \"$e\" ] && [ \"$(uname -m)\" != x86_64 ] "
                   "&& grep -qE 'GenuineIntel|AuthenticAMD' /proc/cpuinfo 2>/dev/null; then "
                   "e=\"emulated (QEMU user mode on x86_64)\"; fi; echo \"${e:-none}\"")


@dataclass
class DeviceReport:
    """A device's answer to the probe. `problems` lists what differs from its profile; `ok` when none does."""

    device: str  # the profile's name
    connection: str  # how it was reached, e.g. pi@pi5.local:22
    arch: str  # uname -m
    cores: int  # cores online
    ram_mb: int  # MemTotal
    python: str | None  # the version of the profile's python, None when it did not run
    python_path: str | None  # where that python is, None when it is missing
    numpy: str | None  # installed versions, None when absent
    runtimes: dict[str, str | None]  # "executorch" and "litert" → installed version or None
    sensors: dict[str, Any] = field(default_factory=dict)  # "power"/"thermal" → reader → "readable: …"/"unavailable: …"
    problems: list[str] = field(default_factory=list)
    emulated: str | None = None  # how the device is emulated (its timings are not the real board's), else None
    tools: dict[str, str] = field(default_factory=dict)  # runtime timed natively → "ready: PATH" / "missing: PATH"

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The JSON `edgeprune devices check` prints."""
        fields = asdict(self)
        problems = fields.pop("problems")
        return {**fields, "ok": self.ok, "problems": problems}


def probe_device(profile: DeviceProfile, endpoint: Endpoint | None = None) -> DeviceReport:
    """Connect to the device (over `endpoint`, default the profile's connection) and report what it is.

    Raises DeviceUnreachableError when it cannot be reached, UserInputError when it is no Linux shell, and
    EdgepruneError when its answer cannot be read.
    """
    from edgeprune.devices.setup import device_python

    endpoint = endpoint or profile.endpoint
    with open_transport(endpoint, device_python(profile, endpoint)) as transport:
        python = shlex.quote(transport.python)
        script = (f"uname -m; getconf _NPROCESSORS_ONLN 2>/dev/null || nproc; "
                  f"awk '/^MemTotal:/ {{print int($2 / 1024)}}' /proc/meminfo; {EMULATION_CHECK}; "
                  f"command -v {python} || echo missing; {python} -c {shlex.quote(probe_script())} "
                  "2>/dev/null || echo null")
        done = transport.run(["sh", "-c", script], timeout_s=120)
        label = transport.label
        sensors = probe_sensors(transport) if done.exit_code == 0 else {}
        tools = probe_tools(transport, profile) if done.exit_code == 0 else {}
    lines = done.stdout.strip().splitlines()
    if done.exit_code != 0 or len(lines) < 6:
        answer = (done.stderr or done.stdout)[-300:]
        raise UserInputError(f"{label} did not answer the probe as a Linux shell: {answer}")
    try:
        arch, cores, ram_mb, python_path = lines[0].strip(), int(lines[1]), int(lines[2]), lines[4].strip()
        emulated = None if lines[3].strip() == "none" else lines[3].strip()
        versions = json.loads(lines[-1]) or {}
        if not isinstance(versions, dict):
            raise ValueError(f"expected a JSON object of versions, got {lines[-1][:80]!r}")
    except ValueError as error:
        reason = " | ".join(line.strip() for line in str(error).splitlines() if line.strip())
        raise EdgepruneError(f"{label} answered the probe with something else than cores, RAM and versions "
                             f"({reason})") from None
    runtimes = {name: versions.get(name) for name in RUNTIMES}
    problems = []
    if arch != profile.arch:
        problems.append(f"arch is {arch}, the profile says {profile.arch}")
    if cores != profile.cores:
        problems.append(f"{cores} cores online, the profile says {profile.cores}")
    problems += [f"the {runtime} benchmark tool {state.split(': ', 1)[1]} is missing or not executable"
                 + (" (edgeprune devices setup builds it)" if RUNTIMES.get(runtime).setup_builds_native_tool else "")
                 for runtime, state in tools.items() if state.startswith("missing")]
    python_runs = profile.runner_for(profile.runtime) == "python"  # else its native tool, checked above
    if not versions:
        problems.append(f"no working python at {transport.python} (set runtime.python in the profile)")
    elif python_runs and not runtimes[profile.runtime]:
        problems.append(f"the profile's runtime {profile.runtime} is not installed for {python_path}")
    elif python_runs and not versions.get("numpy"):
        problems.append(f"numpy, which the benchmark runner needs, is not installed for {python_path}")
    return DeviceReport(profile.name, label, arch, cores, ram_mb, versions.get("python"),
                        None if python_path == "missing" else python_path, versions.get("numpy"), runtimes,
                        sensors, problems, emulated or profile.emulation_label, tools)


def probe_tools(transport: Transport, profile: DeviceProfile) -> dict[str, str]:
    """Whether the native benchmark tool of each runtime the profile times natively is there and executable."""
    from edgeprune.devices.setup import install_runtimes

    wanted = dict.fromkeys([*profile.searched_runtimes, *install_runtimes(profile)])
    paths = {r: profile.native_binaries[r] for r in wanted
             if profile.runner_for(r) == "native" and r in profile.native_binaries}
    if not paths:
        return {}
    script = "; ".join(f"test -x {shlex.quote(p)} && echo ready || echo missing" for p in paths.values())
    done = transport.run(["sh", "-c", script], timeout_s=120)
    states = done.stdout.split()
    return {r: f"{states[i] if i < len(states) else 'missing'}: {p}" for i, (r, p) in enumerate(paths.items())}


def probe_sensors(transport: Transport) -> dict[str, Any]:
    """The energy and thermal readers the benchmark would use, read through the transport from this host."""
    from edgeprune.bench.native_run import SENSOR_FILES, TransportEnvironment  # torch: only when a device answered
    from edgeprune.bench.sensors.meter import probe

    return probe(TransportEnvironment(transport, SENSOR_FILES))
