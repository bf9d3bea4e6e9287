"""Energy over a block of work, minus what the board draws at idle, and thermal state around it."""

import threading
import time

from .base import (
    POWER_SENSORS,
    THERMAL_READERS,
    Environment,
    PowerSensor,
    SensorUnavailable,
    ThermalReader,
    ThermalState,
)


def trapezoid_joules(samples: list[tuple[float, float]]) -> float:
    """Energy from (seconds, watts) samples in time order; one sample counts as constant power for no time."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:], strict=False))


def millijoules_per_run(active_j: float, seconds: float, idle_w: float, runs: int) -> float:
    """Energy above idle per run: (energy while running − idle power × the same time) / runs, in mJ."""
    return (active_j - idle_w * seconds) / runs * 1000


class EnergyMeter:
    """Measures one block of work with a power sensor: a counter is read at both ends, a power meter is
    sampled by a background thread (the runtimes release the GIL while they compute)."""

    def __init__(self, sensor: PowerSensor) -> None:
        self.sensor = sensor
        self.samples: list[tuple[float, float]] = []
        self.joules = 0.0
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_reading: object = None
        self._started = 0.0
        self._error: SensorUnavailable | None = None

    def _sample(self) -> None:
        self.samples.append((time.perf_counter(), float(self.sensor.read())))

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.sensor.sample_interval_s):
                self._sample()
        except SensorUnavailable as error:
            self._error = error

    def __enter__(self) -> "EnergyMeter":
        self.samples = []
        self._stop.clear()
        if self.sensor.counter:
            self._start_reading = self.sensor.read()
            self._started = time.perf_counter()
        else:
            self._sample()
            self._started = self.samples[0][0]
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sensor.counter:
            end = self.sensor.read()
            self.seconds = time.perf_counter() - self._started
            self.joules = self.sensor.joules_between(self._start_reading, end)
            return
        self._stop.set()
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise self._error
        self._sample()
        self.seconds = self.samples[-1][0] - self._started
        self.joules = trapezoid_joules(self.samples)

    @property
    def watts(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else 0.0

    def idle_watts(self, seconds: float) -> float:
        """Mean power over `seconds` of doing nothing."""
        with self:
            time.sleep(seconds)
        return self.watts


def readable_thermal_readers(env: Environment) -> dict[str, tuple[ThermalReader, ThermalState]]:
    """Every thermal reader that reads on this device, with its first reading."""
    found = {}
    for name, cls in sorted(THERMAL_READERS.items()):
        reader = cls(env)
        try:
            found[name] = (reader, reader.read())
        except SensorUnavailable:
            continue
    return found


def thermal_report(readers: dict[str, tuple[ThermalReader, ThermalState]]) -> dict:
    """Read every reader again and summarise: temperatures before and after, throttled or not, and why."""
    before_c: dict[str, float] = {}
    after_c: dict[str, float] = {}
    reasons: list[str] = []
    for name, (reader, before) in readers.items():
        try:
            after = reader.read()
        except SensorUnavailable:
            after = ThermalState()  # the temperatures after are missing from the result, which shows it
        before_c.update({f"{name}:{k}": v for k, v in before.temperatures_c.items()})
        after_c.update({f"{name}:{k}": v for k, v in after.temperatures_c.items()})
        reasons += [f"{name} before: {r}" for r in before.reasons] + [f"{name} after: {r}" for r in after.reasons]
        reasons += [f"{name} {r}" for r in reader.changes(before, after)]
    return {"thermal_before_c": before_c, "thermal_after_c": after_c, "throttled": bool(reasons),
            "throttle_reasons": reasons}


def probe(env: Environment) -> dict:
    """Which power sensors and thermal readers read on this device, or why not, for `devices check`."""
    power = {}
    for name, cls in sorted(POWER_SENSORS.items()):
        sensor = cls(env)
        try:
            value = sensor.read()
            power[name] = f"readable: {sensor.describe()}" + ("" if sensor.counter else f", {float(value):.2f} W now")
        except SensorUnavailable as error:
            power[name] = f"unavailable: {error}"
    thermal = {}
    for name, cls in sorted(THERMAL_READERS.items()):
        try:
            state = cls(env).read()
            thermal[name] = {"temperatures_c": state.temperatures_c, "throttled": state.throttled,
                             "reasons": state.reasons}
        except SensorUnavailable as error:
            thermal[name] = f"unavailable: {error}"
    return {"power": power, "thermal": thermal}
