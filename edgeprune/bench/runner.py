"""Self-contained benchmark runner: loads an artifact in a fresh process, times it, prints JSON.

Runs as a plain script (`python runner.py ...`) with only the standard library, numpy and the runtime
package (`executorch`, or `ai-edge-litert` / `tflite-runtime`), so it does not import edgeprune and
its memory figures are the runtime's own. It is the same file a Linux device will run. With
`--sensors` (a zip of edgeprune/bench/sensors, standard library only) it also records thermal state
before and after, and energy over the timed runs minus idle when `--power-sensor` reads on the device.
"""

import argparse
import contextlib
import json
import os
import resource
import statistics
import sys
import time

# the environment of a process that times a runtime: one OpenMP thread. Torch (which only wraps inputs there) and
# the MKL GEMVs that ExecuTorch's custom_sdpa calls from its own thread pool's workers (the `fast` attention) start
# OpenMP teams whose threads spin between calls on the cores the runtime's pool decodes on: SmolLM2 `int4-decoder-all`
# at 2 threads decoded 44 to 61 tokens/s with them and 183 without (2026-12-07, third session, docs/FINDINGS.md).
# Read when OpenMP starts, so it is set for the process, not changed inside it.
TIMING_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status, in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_rss_mb() -> float:
    # VmHWM belongs to this process image; ru_maxrss would carry the parent's peak across fork+exec
    try:
        return status_mb("VmHWM")
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def emulation() -> str | None:
    """How this process is emulated, else None: the board's own word (the emulated board writes
    /etc/edgeprune-emulated), else a non-x86 userland on an x86 CPU, which only QEMU user mode shows."""
    try:
        with open("/etc/edgeprune-emulated") as marker:
            said = marker.readline().strip()
        if said:
            return said
    except OSError:
        pass
    machine = os.uname().machine
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            x86 = any(vendor in cpuinfo.read() for vendor in ("GenuineIntel", "AuthenticAMD"))
    except OSError:
        return None
    return f"emulated (QEMU user mode on x86_64, as {machine})" if x86 and machine not in ("x86_64", "i686") else None


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def executorch_bindings():  # noqa: ANN201 - a module
    """ExecuTorch's runtime pybinding, loaded the cheap way when this version has it.

    `executorch.runtime` reaches the binding through `portable_lib`, which imports the whole `executorch.exir`
    compiler (torch._dynamo, inductor) for one warning class: 3 s of a 4.3 s start on a 2-core x86 host, and more
    on a board, paid by every benchmark. The binding itself needs only torch loaded first (its libc10). Both
    routes end in the same `_C` extension; the public one stays the fallback for a version laid out otherwise."""
    try:
        from executorch.extension.pybindings import _C as bindings
    except ImportError:
        bindings = None
    if bindings is None or not all(hasattr(bindings, name) for name in
                                   ("_load_program", "_unsafe_reset_threadpool", "Verification")):
        from executorch.extension.pybindings import portable_lib as bindings
    return bindings


def executorch_runner(artifact: str, inputs: list, threads: int):  # noqa: ANN201 - returns a zero-arg callable
    import torch

    torch.set_num_threads(1)  # torch only wraps inputs; its OpenMP threads must not compete
    bindings = executorch_bindings()
    bindings._unsafe_reset_threadpool(threads)  # before any program loads
    tensors = [torch.from_numpy(array) for array in inputs]
    yield
    method = load_forward(bindings, artifact)
    yield lambda: method(tensors)


def load_forward(bindings, artifact: str):  # noqa: ANN001, ANN201 - the binding module; its method object
    """The program's forward method, as `executorch.runtime.Runtime.load_program(path).load_method("forward")`
    loads it (the same verification level); call it with the list of input tensors."""
    program = bindings._load_program(artifact, enable_etdump=False, debug_buffer_size=0,
                                     program_verification=bindings.Verification.InternalConsistency)
    names = {program.get_method_name(index) for index in range(program.num_methods())}
    # a generator on ExecuTorch's LLM kernels (its fast attention) says so; their library loads before its method
    if "use_sdpa_with_kv_cache" in names and bool(program.load_method("use_sdpa_with_kv_cache")([])[0]):
        from executorch.extension.llm.custom_ops import custom_ops  # noqa: F401 - the import loads the kernels
    return program.load_method("forward")


def litert_runner(artifact: str, inputs: list, threads: int):  # noqa: ANN201 - returns a zero-arg callable
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        from tflite_runtime.interpreter import Interpreter
    yield
    interpreter = Interpreter(artifact, num_threads=threads)
    if {"prefill", "decode"} <= set(interpreter.get_signature_list()):
        yield generator_call(interpreter, inputs)
        return
    runner = interpreter.get_signature_runner()
    details = runner.get_input_details()
    names = sorted(details, key=lambda name: int(name.rsplit("_", 1)[-1]))
    feed = {name: array.astype(details[name]["dtype"]) for name, array in zip(names, inputs, strict=True)}
    yield lambda: runner(**feed)


def generator_call(interpreter, inputs: list):  # noqa: ANN001, ANN201 - a LiteRT Interpreter; a zero-arg callable
    """The call of a LiteRT generator (edgeprune/export/litert_generator.py) that `inputs` (token ids [1, S] and their
    positions) make, as edgeprune's generators make it (edgeprune/bench/litert_generate.py, `CachedGenerator`, not
    importable here: this script runs alone on a device), returning the call's logits [S, vocab]: one token is a
    decode step on the first subgraph's own input tensors, the cache in place, its new rows written back; more is
    `prefill`, whose fixed length the ids are padded to (as an app pads a shorter prompt), the cache passed in. The
    cache is zeros (its values cost nothing to attend)."""
    import numpy as np

    ids, positions = inputs
    start = int(positions.reshape(-1)[0])
    if ids.shape[-1] == 1:
        interpreter.allocate_tensors()
        decode = interpreter.get_signature_runner("decode")  # dropped below: the interpreter will not run beside it
        cache_inputs = {name: detail["index"] for name, detail in decode.get_input_details().items()}
        new_outputs = {name: detail["index"] for name, detail in decode.get_output_details().items()}
        if {(d["name"], d["index"]) for d in interpreter.get_input_details()} != \
                {(d["name"], d["index"]) for d in decode.get_input_details().values()}:
            raise ValueError("this LiteRT generator's decode signature is not the interpreter's first "
                             "subgraph (exported before edgeprune 2026-12-06); export it again")
        del decode
        tensor = interpreter.tensor
        for index in cache_inputs.values():
            tensor(index)()[...] = 0
        tensor(cache_inputs["input_ids"])()[...] = ids.reshape(-1)[0]
        tensor(cache_inputs["input_pos"])()[...] = start
        caches = [(cache_inputs[name], new_outputs[name.replace("_cache_", "_new_")]) for name in cache_inputs
                  if "_cache_" in name]

        def step():  # noqa: ANN202 - the logits [1, vocab], taken out as an app takes them to pick a token
            interpreter.invoke()
            for cache, rows in caches:
                tensor(cache)()[:, :, start:start + 1] = tensor(rows)()
            return tensor(new_outputs["logits"])()[0].copy()

        return step
    runner = interpreter.get_signature_runner("prefill")
    details = runner.get_input_details()
    length = int(details["input_ids"]["shape"][-1])
    padded = np.zeros((1, length), dtype=details["input_ids"]["dtype"])
    padded[0, :ids.shape[-1]] = ids.reshape(-1)[:length]
    feed = {name: np.zeros(detail["shape"], detail["dtype"]) for name, detail in details.items()}
    feed.update(input_ids=padded, input_pos=np.arange(start, start + length, dtype=details["input_pos"]["dtype"]))
    return lambda: runner(**feed)["logits"][0]


# each runtime's runner by the name edgeprune's runtime descriptors use (edgeprune/runtimes/): this script runs on
# devices without edgeprune, so the table is here; a third party's runtime pushes a module of its own beside this
# script (its descriptor's `device_runner`), named by --runner-module, with a `runner` of the same form
RUNNERS = {"executorch": executorch_runner, "litert": litert_runner}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--runtime", required=True, help=f"{', '.join(sorted(RUNNERS))}, or any with --runner-module")
    parser.add_argument("--runner-module", help="a module beside this script whose `runner` times --runtime's files")
    parser.add_argument("--inputs", required=True, help=".npz with arrays arg_0, arg_1, ... in call order")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="time runs beyond --runs until they add up to this long (at most 100x --runs)")
    parser.add_argument("--out", help="also write the JSON result to this file")
    parser.add_argument("--sensors", help="zip of the edgeprune_sensors package (energy and thermal readers)")
    parser.add_argument("--power-sensor", help="the power sensor to measure energy with (see POWER_SENSORS)")
    parser.add_argument("--idle-s", type=float, default=1.0, help="seconds of idle power measured before the runs")
    args = parser.parse_args()
    if args.runner_module:
        import importlib

        # pushed beside this script; Python put the folder of the script's real file on sys.path, which for a linked
        # copy (the local transport links files) is not that folder
        sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
        runner = importlib.import_module(args.runner_module).runner
    elif args.runtime in RUNNERS:
        runner = RUNNERS[args.runtime]
    else:
        parser.error(f"--runtime {args.runtime}: no runner here ({', '.join(sorted(RUNNERS))}) and no --runner-module")

    import numpy as np

    sensors = None
    if args.sensors:
        sys.path.insert(0, args.sensors)
        import edgeprune_sensors as sensors
    unavailable = sensors.SensorUnavailable if sensors else ()
    # EDGEPRUNE_SENSOR_ROOT reads sysfs under another root (a fixture tree in tests, a chroot's host view)
    environment = sensors.Environment(os.environ.get("EDGEPRUNE_SENSOR_ROOT", "/")) if sensors else None
    thermal = sensors.meter.readable_thermal_readers(environment) if sensors else {}
    meter, energy = None, {"unavailable": "no power sensor requested"}
    if sensors and args.power_sensor:
        try:
            sensor = sensors.power_sensor(args.power_sensor, environment)
            meter = sensors.meter.EnergyMeter(sensor)
            meter.sensor.read()
            energy = {"sensor": sensor.describe()}
        except unavailable as error:
            meter, energy = None, {"unavailable": f"{args.power_sensor}: {error}"}

    with np.load(args.inputs) as saved:
        inputs = [saved[f"arg_{i}"] for i in range(len(saved.files))]
    stages = runner(args.artifact, inputs, args.threads)
    next(stages)  # runtime imported and configured, nothing loaded yet
    rss_before_load = status_mb("VmRSS")
    start = time.perf_counter()
    run = next(stages)
    load_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    run()
    first_ms = (time.perf_counter() - start) * 1000
    for _ in range(args.warmup):
        run()

    def timed_runs() -> list[float]:
        # a window of at least --min-seconds: 30 runs of a 2 ms model take 60 ms, which one burst of the machine's
        # noise covers whole (benchmarks/bench_window.py: 70 % of such p50s within ±10 % of their median here,
        # 90 % with a 1 s window)
        times, total_ms = [], 0.0
        while len(times) < args.runs or (total_ms < args.min_seconds * 1000 and len(times) < 100 * args.runs):
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1000)
            total_ms += times[-1]
        return times

    try:
        idle_w = meter.idle_watts(args.idle_s) if meter else None
        with meter or contextlib.nullcontext():
            samples = timed_runs()
    except unavailable as error:  # the sensor stopped answering mid-run: time again without it
        meter, energy = None, {"unavailable": f"{args.power_sensor}: {error}"}
        samples = timed_runs()
    if meter:
        energy.update(joules=meter.joules, seconds=meter.seconds, idle_w=idle_w, active_w=meter.watts,
                      samples=len(meter.samples) or 2, runs=len(samples),
                      mj_per_run=sensors.meter.millijoules_per_run(meter.joules, meter.seconds, idle_w, len(samples)))
    mean = statistics.fmean(samples)
    result = {
        "runtime": args.runtime,
        "threads": args.threads,
        "warmup_runs": args.warmup,
        "timed_runs": len(samples),
        "latency_ms": samples,
        "p50_ms": percentile(samples, 50),
        "p90_ms": percentile(samples, 90),
        "p99_ms": percentile(samples, 99),
        "mean_ms": mean,
        "cv": statistics.pstdev(samples) / mean if mean else 0.0,
        "first_run_ms": first_ms,
        "load_ms": load_ms,
        "rss_before_load_mb": rss_before_load,
        "peak_rss_mb": peak_rss_mb(),
        "file_bytes": os.path.getsize(args.artifact),
        "energy": energy,
        "emulated": emulation(),
        **(sensors.meter.thermal_report(thermal) if sensors else {}),
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    if args.out:
        with open(args.out, "w") as out:
            json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
