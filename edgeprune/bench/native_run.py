"""Time an artifact with a native benchmark binary on a device (phones have no Python), and read its
thermal state from the host through the transport."""

import fnmatch
import shlex
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from edgeprune.bench.native import NATIVE_RUNNERS, peak_rss_wrapper, split_peak_rss
from edgeprune.bench.sensors import Environment, SensorUnavailable
from edgeprune.bench.sensors.meter import readable_thermal_readers, thermal_report
from edgeprune.devices.transports.base import Transport
from edgeprune.errors import EdgepruneError, UserInputError

THERMAL_FILES = ("/sys/class/thermal/thermal_zone*/type", "/sys/class/thermal/thermal_zone*/temp",
                 "/sys/class/thermal/thermal_zone*/trip_point_*_type",
                 "/sys/class/thermal/thermal_zone*/trip_point_*_temp")
# everything the power sensors read, for `edgeprune devices check`
SENSOR_FILES = (*THERMAL_FILES, "/sys/class/powercap/intel-rapl:*/name", "/sys/class/powercap/intel-rapl:*/energy_uj",
                "/sys/class/powercap/intel-rapl:*/max_energy_range_uj", "/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*/*",
                "/sys/class/power_supply/battery/status", "/sys/class/power_supply/battery/current_now",
                "/sys/class/power_supply/battery/voltage_now")


class TransportEnvironment(Environment):
    """Sensor reads on a device without Python: one `grep -H` round trip snapshots the sysfs files, and
    commands run through the transport."""

    def __init__(self, transport: Transport, patterns: tuple[str, ...] = THERMAL_FILES) -> None:
        super().__init__("/")
        self.transport, self.patterns = transport, patterns
        self.files: dict[str, str] = {}
        self.refresh()

    def refresh(self) -> None:
        done = self.transport.run(["sh", "-c", f"grep -s -H . {' '.join(self.patterns)}; true"], timeout_s=60)
        self.files = {}
        for line in done.stdout.splitlines():
            path, sep, value = line.partition(":")
            if sep and path.startswith("/") and path not in self.files:
                self.files[path] = value.strip()

    def read(self, absolute: str) -> str:
        if absolute not in self.files:
            raise SensorUnavailable(f"{absolute} was not readable on the device")
        return self.files[absolute]

    def glob(self, pattern: str) -> list[str]:
        parts = PurePosixPath(pattern).parts
        known = set(self.files) | {str(p) for f in self.files for p in PurePosixPath(f).parents}
        return sorted(p for p in known if len(PurePosixPath(p).parts) == len(parts)
                      and all(fnmatch.fnmatchcase(a, b) for a, b in zip(PurePosixPath(p).parts, parts, strict=True)))

    def run(self, argv: list[str]) -> str:
        done = self.transport.run(argv, timeout_s=self.command_timeout_s)
        if done.exit_code == 127:
            raise SensorUnavailable(f"{argv[0]} is not installed on the device")
        if done.exit_code != 0:
            raise SensorUnavailable(f"{' '.join(argv)} exited {done.exit_code} on the device")
        return done.stdout


def _thermal_readers(transport: Transport) -> tuple[TransportEnvironment, dict]:
    env = TransportEnvironment(transport)
    return env, readable_thermal_readers(env)


def place_binary(transport: Transport, binary: str) -> str:
    """The device path of a native tool: `binary` itself, or where a local build of it was pushed."""
    if not Path(binary).is_file():
        return binary
    remote_binary = transport.push(Path(binary), Path(binary).name)
    transport.run(["chmod", "+x", remote_binary], timeout_s=60)
    return remote_binary


def run_tool(transport: Transport, argv: list[str], threads: int, timeout_s: float, tool: str,
             binary: str) -> tuple[float | None, str]:
    """(polled peak RSS in MiB or None, the tool's output) of `argv` on the device, pinned to `threads` cores;
    exit 2 when the binary cannot run there, an EdgepruneError when it fails."""
    done = transport.run(peak_rss_wrapper([*transport.pin_prefix(threads), *argv]), timeout_s=timeout_s)
    polled_peak_mb, output = split_peak_rss(done.stdout + done.stderr)
    if done.exit_code in (126, 127):
        raise UserInputError(f"cannot run {tool} at {binary} on {transport.label} (exit {done.exit_code}: "
                             f"{output.strip()[-160:]}); push the binary there, run `edgeprune devices setup`, or pass "
                             "--binary PATH")
    if done.exit_code != 0:
        tail = " | ".join(output.strip().splitlines()[-5:])
        raise EdgepruneError(f"{tool} failed on {transport.label} (exit {done.exit_code}): {tail}")
    return polled_peak_mb, output


def run_native(transport: Transport, artifact: Path, inputs: tuple[torch.Tensor, ...], runtime: str, threads: int,
               warmup: int, runs: int, binary: str, timeout_s: float, scratch: Path) -> dict:
    """Fields of a BenchmarkResult (and an `energy` entry) from one run of the runtime's native tool."""
    tool = NATIVE_RUNNERS.get(runtime)
    remote_binary = place_binary(transport, binary)
    remote_artifact = transport.push(artifact, f"artifact{artifact.suffix}")
    input_files = []
    for index, tensor in enumerate(inputs):
        raw = scratch / f"input_{index}.bin"
        np.ascontiguousarray(tensor.numpy()).tofile(raw)  # raw little-endian, as executor_runner --inputs reads
        input_files.append(transport.push(raw))
    env, readers = _thermal_readers(transport)
    argv = tool.command(remote_binary, remote_artifact, threads, warmup, runs, input_files)
    polled_peak_mb, output = run_tool(transport, argv, threads, timeout_s, tool.tool, binary)
    try:
        parsed = tool.parse(output, warmup)
    except ValueError as error:
        raise EdgepruneError(f"{tool.tool} on {transport.label} printed no timings ({error}); "
                             f"its output ends with {output.strip()[-300:]!r}") from None
    env.refresh()
    thermal = thermal_report(readers)
    notes = [*parsed.notes, f"command: {shlex.join(argv)}"]
    if parsed.tool_peak_memory_mb is not None:
        notes.append(f"{tool.tool} reports a peak memory footprint of {parsed.tool_peak_memory_mb:.1f} MB")
    mean = parsed.mean_ms
    peaks = [mb for mb in (polled_peak_mb, parsed.process_peak_rss_mb) if mb is not None]
    return {
        "runtime": runtime, "threads": threads, "warmup_runs": warmup, "timed_runs": parsed.timed_runs,
        "latency_ms": parsed.latency_ms, "p50_ms": parsed.p50_ms, "p90_ms": parsed.p90_ms, "p99_ms": parsed.p99_ms,
        "mean_ms": mean, "cv": (parsed.std_ms or 0.0) / mean if mean else 0.0, "first_run_ms": parsed.first_run_ms,
        "load_ms": parsed.load_ms, "rss_before_load_mb": None, "peak_rss_mb": max(peaks, default=None),
        "file_bytes": artifact.stat().st_size, "runner": tool.tool, "notes": notes, **thermal,
        "energy": {"unavailable": f"{tool.tool} runs with no power sampler on the device"},
    }
