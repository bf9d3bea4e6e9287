"""Benchmark an artifact in a separate process on a device and return a typed result.

Two ways to time it: the self-contained Python runner (runner.py, for Linux boards with Python), or
a native benchmark binary (`benchmark_model`, `executor_runner`; for phones) whose output is parsed.
Energy is measured on the device when a power sensor reads there, else estimated from the profile's
power model, and the result says which; thermal state before and after is recorded either way.
"""

import importlib.util
import json
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from edgeprune.bench.runner import TIMING_ENV
from edgeprune.devices.profile import DeviceProfile, PowerModel, native_keys
from edgeprune.devices.transports.base import Transport
from edgeprune.errors import EdgepruneError, UserInputError
from edgeprune.runtimes import RUNTIMES, runtime_for_suffix

RUNNER = Path(__file__).with_name("runner.py")
DEVICE_RUNNER_MODULE = "edgeprune_runtime_runner"  # the name a runtime's own device runner is pushed under
SENSORS = Path(__file__).with_name("sensors")
SENSORS_PACKAGE = "edgeprune_sensors"  # the name the runner imports the pushed zip under
GENERIC_POWER_SENSOR = "rapl"  # tried on boards whose profile names no sensor; unreadable elsewhere
MEASURED, ESTIMATED, UNAVAILABLE = "measured:", "estimated:power-model", "unavailable"


@dataclass
class BenchmarkResult:
    device: str
    runtime: str
    threads: int
    warmup_runs: int
    timed_runs: int
    latency_ms: list[float]  # every timed run; empty when a native tool prints only aggregates
    p50_ms: float | None  # None only when a native tool's output format has no median
    p90_ms: float | None
    p99_ms: float | None
    mean_ms: float
    cv: float  # coefficient of variation of the timed runs
    first_run_ms: float | None
    load_ms: float | None
    rss_before_load_mb: float | None  # the process with the runtime imported, before the program loads
    peak_rss_mb: float | None  # peak resident memory of the whole benchmark process
    file_bytes: int
    measured: bool = True  # the latency and memory figures come from running the artifact on `device`
    energy_mj_per_inference: float | None = None  # energy above idle per timed run
    energy_source: str = UNAVAILABLE  # "measured:<sensor>", "estimated:power-model" or "unavailable"
    energy_detail: str = ""  # how it was measured or estimated, or why there is none
    idle_power_w: float | None = None
    active_power_w: float | None = None
    thermal_before_c: dict[str, float] = field(default_factory=dict)  # "reader:zone" -> °C
    thermal_after_c: dict[str, float] = field(default_factory=dict)
    throttled: bool = False  # the device throttled (or was throttling) around the timed runs
    throttle_reasons: list[str] = field(default_factory=list)
    runner: str = "python"  # "python" (runner.py) or the native tool's name
    notes: list[str] = field(default_factory=list)
    # e.g. "emulated (QEMU user mode on x86_64)": the figures are the emulator's, never a real board's
    emulated: str | None = None
    board: str = ""  # which board of a lab pool ran it (edgeprune.cluster), when one did
    # a generator's one-token decode step at its prompt's depth, timed the same way (median), where one was timed
    decode_p50_ms: float | None = None
    # a generator's time to first token: the prefill of its prompt (--prompt-tokens), median, in ms
    ttft_p50_ms: float | None = None
    # a generator's KV-cache slots the timed calls left unwritten, in MB: resident only once written, so the memory
    # budget adds them to the measured peak to count the cache at the full context
    kv_unwritten_mb: float | None = None

    @property
    def file_mb(self) -> float:
        return self.file_bytes / 1e6

    @property
    def decode_tokens_per_s(self) -> float | None:
        return None if not self.decode_p50_ms else 1e3 / self.decode_p50_ms

    @property
    def energy_measured(self) -> bool:
        return self.energy_source.startswith(MEASURED)


def benchmark_local(
    artifact: Path,
    inputs: tuple[torch.Tensor, ...],
    threads: int,
    runtime: str | None = None,
    warmup: int = 5,
    runs: int = 30,
    device: str | None = None,
    timeout_s: float = 600,
    *,
    profile: DeviceProfile | None = None,
    min_seconds: float = 0.0,
) -> BenchmarkResult:
    """Run the self-contained runner on this machine in a fresh Python process.

    The runtime follows the file type (`.pte`: ExecuTorch, `.tflite`: LiteRT) unless given; `device`
    defaults to the profile's name, else "host".
    """
    from edgeprune.devices.transports.local import LocalEndpoint, LocalTransport

    with LocalTransport(LocalEndpoint(), python=sys.executable) as transport:
        return benchmark_on(transport, artifact, inputs, runtime, threads, warmup, runs, device, timeout_s,
                            profile=profile, min_seconds=min_seconds)


def benchmark_on(
    transport: Transport,
    artifact: Path,
    inputs: tuple[torch.Tensor, ...],
    runtime: str | None,
    threads: int,
    warmup: int = 5,
    runs: int = 30,
    device: str | None = None,
    timeout_s: float = 600,
    *,
    profile: DeviceProfile | None = None,
    native_binary: str | None = None,
    idle_s: float = 1.0,
    min_seconds: float = 0.0,
) -> BenchmarkResult:
    """Push the runner (or use a native binary), the artifact and the inputs to a device, time the artifact
    there, fetch the result.

    `profile` supplies the power sensor, the power model for estimates and the native binaries
    (runtime.runner = "native", or the runtimes in runtime.native); `native_binary` (a path on the device, or a
    local file to push) picks the native tool for this artifact's runtime. `min_seconds`: the Python runner times
    runs beyond `runs` until they add up to this long (native tools time `runs` exactly). The Python runner needs
    `transport.python` with numpy and the runtime package. The work folder is left for `transport.close()` to remove.
    """
    if runs < 1 or warmup < 0 or min_seconds < 0:
        raise ValueError(f"need runs >= 1, warmup >= 0 and min_seconds >= 0, got runs={runs}, warmup={warmup}, "
                         f"min_seconds={min_seconds}")
    if threads < 1:
        raise ValueError(f"need threads >= 1, got {threads}")
    artifact = Path(artifact)
    runtime = runtime or runtime_for_suffix(artifact.suffix)
    if runtime is None:
        raise ValueError(f"{artifact}: cannot tell the runtime from the file type; pass runtime=")
    device = device or (profile.name if profile else "host")
    native = profile is not None and profile.runner_for(runtime) == "native"
    binary = native_binary or (profile.native_binaries.get(runtime) if native else None)
    if native and binary is None:
        raise UserInputError(f"device {profile.name} runs native benchmark tools but names none for {runtime} "
                             f"(runtime.{native_keys()[runtime]} in {profile.source}, or --binary)")
    with tempfile.TemporaryDirectory(prefix="edgeprune-bench-") as scratch:
        if binary is not None:
            from edgeprune.bench.native_run import run_native

            data = run_native(transport, artifact, inputs, runtime, threads, warmup, runs, binary, timeout_s,
                              Path(scratch))
        else:
            data = _run_python(transport, artifact, inputs, runtime, threads, warmup, runs, timeout_s, Path(scratch),
                               _power_sensor(profile), idle_s, min_seconds)
    energy = data.pop("energy", {"unavailable": "the runner reported no energy"})
    result = BenchmarkResult(device=device, **data)
    if result.emulated is None and profile is not None and profile.emulated:
        result.emulated = profile.emulation_label
    apply_energy(result, energy, profile.power if profile else None)
    return result


def _power_sensor(profile: DeviceProfile | None) -> str:
    if profile is not None and profile.power is not None and profile.power.sensor:
        return profile.power.sensor
    return GENERIC_POWER_SENSOR


def sensors_zip(folder: Path) -> Path:
    """The sensors package as a zip the runner puts on sys.path (zipimport, standard library)."""
    path = folder / f"{SENSORS_PACKAGE}.zip"
    with zipfile.ZipFile(path, "w") as bundle:
        for source in sorted(SENSORS.glob("*.py")):
            bundle.write(source, f"{SENSORS_PACKAGE}/{source.name}")
    return path


def _run_python(transport: Transport, artifact: Path, inputs: tuple[torch.Tensor, ...], runtime: str, threads: int,
                warmup: int, runs: int, timeout_s: float, scratch: Path, power_sensor: str, idle_s: float,
                min_seconds: float = 0.0) -> dict:
    inputs_path = scratch / "inputs.npz"
    np.savez(inputs_path, **{f"arg_{i}": t.numpy() for i, t in enumerate(inputs)})
    runner = transport.push(RUNNER, "edgeprune_runner.py")
    sensors = transport.push(sensors_zip(scratch), f"{SENSORS_PACKAGE}.zip")
    # the artifact keeps its suffix (runtimes check it) but not its name, which may clash with ours
    remote_artifact = transport.push(artifact, f"artifact{artifact.suffix}")
    remote_inputs = transport.push(inputs_path, "inputs.npz")
    own_runner, device_runner = [], RUNTIMES.get(runtime).device_runner
    if device_runner:  # a third party's runtime: its runner module goes beside runner.py
        source = importlib.util.find_spec(device_runner).origin
        transport.push(Path(source), f"{DEVICE_RUNNER_MODULE}.py")
        own_runner = ["--runner-module", DEVICE_RUNNER_MODULE]
    command = [*transport.pin_prefix(threads), transport.python, runner, "--artifact", remote_artifact,
               "--runtime", runtime, *own_runner, "--inputs", remote_inputs, "--threads", str(threads),
               "--warmup", str(warmup), "--runs", str(runs), "--out", "result.json", "--sensors", sensors,
               "--power-sensor", power_sensor, "--idle-s", f"{idle_s:g}", "--min-seconds", f"{min_seconds:g}"]
    done = transport.run(command, timeout_s=timeout_s, env=TIMING_ENV)
    if done.exit_code != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise EdgepruneError(f"benchmark of {artifact} on {transport.label} failed (exit {done.exit_code}): "
                             f"{' | '.join(tail)}")
    try:
        return json.loads(transport.fetch("result.json", scratch / "result.json").read_text())
    except (EdgepruneError, json.JSONDecodeError) as error:
        raise EdgepruneError(f"benchmark of {artifact} on {transport.label} left no result ({error}); "
                             f"it printed {done.stdout[-300:]!r}") from None


def apply_energy(result: BenchmarkResult, energy: dict, power: PowerModel | None) -> None:
    """Fill the energy fields from the device's measurement, else from the power model, saying which."""
    if "mj_per_run" in energy:
        result.energy_mj_per_inference = energy["mj_per_run"]
        result.energy_source = MEASURED + energy["sensor"].split()[0]
        result.idle_power_w, result.active_power_w = energy["idle_w"], energy["active_w"]
        result.energy_detail = (f"{energy['sensor']}: {energy['joules']:.3f} J over {energy['seconds']:.3f} s of "
                                f"{energy['runs']} runs ({energy['samples']} readings), minus idle "
                                f"{energy['idle_w']:.3f} W")
        if result.energy_mj_per_inference < 0:
            result.notes.append("measured energy above idle is negative: the run was within the sensor's noise")
        return
    why = energy.get("unavailable", "no sensor reading")
    if power is None:
        result.energy_detail = f"no power sensor reading ({why}) and no [power] model in the device profile"
        return
    result.energy_mj_per_inference = estimate_mj_per_inference(power, result.mean_ms)
    result.energy_source = ESTIMATED
    result.idle_power_w, result.active_power_w = power.idle_w, power.active_w
    result.energy_detail = (f"({power.active_w:g} W active - {power.idle_w:g} W idle) x {result.mean_ms:.3f} ms mean "
                            f"latency, from the profile's power model; not measured: {why}")


def estimate_mj_per_inference(power: PowerModel, mean_ms: float) -> float:
    """Energy above idle per inference from the profile's power model: (active − idle) W × latency."""
    return (power.active_w - power.idle_w) * mean_ms
