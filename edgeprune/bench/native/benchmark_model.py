"""LiteRT / TensorFlow Lite `benchmark_model`.

Recent builds print `INFO: count=50 first=106022 curr=105780 min=105416 max=106528 avg=105784 std=260
p5=... median=... p95=...` for the warm-up and then the timed runs, `INFO: Inference timings in us:
Init: ..., First inference: ..., Warmup (avg): ..., Inference (avg): ...` and memory lines. Older
builds drop the `INFO: ` prefix and the percentiles, print `Average inference timings in us: Warmup:
..., Init: ..., Inference: ...` (or `no stats: ...`), and any number may be in scientific notation.
The tool prints no per-run times, so `latency_ms` stays empty and p90/p99 are unknown.
"""

import re
from collections.abc import Sequence

from edgeprune.bench.native.base import NATIVE_RUNNERS, NativeRun, NativeRunner

NUMBER = r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
COUNT_LINE = re.compile(rf"^(?:INFO:\s*)?count=(?P<count>\d+)(?P<rest>(?:\s+\w+={NUMBER})+)", re.MULTILINE)
FIELD = re.compile(rf"(\w+)=({NUMBER})")
TIMINGS = re.compile(rf"Inference timings in us: Init: (?P<init>{NUMBER}), First inference: (?P<first>{NUMBER}), "
                     rf"Warmup \(avg\): (?P<warmup>{NUMBER}), Inference \(avg\): (?P<avg>{NUMBER})")
OLD_TIMINGS = re.compile(rf"Average inference timings in us: Warmup: (?P<warmup>{NUMBER}), Init: (?P<init>{NUMBER}), "
                         rf"(?:Inference|no stats): (?P<avg>{NUMBER})")
PEAK = re.compile(rf"(?:Overall peak memory footprint \(MB\) via periodic monitoring: (?P<periodic>{NUMBER}))|"
                  rf"(?:(?:Peak memory footprint|Memory footprint delta from the start of the tool) \(MB\): "
                  rf"init={NUMBER} overall=(?P<overall>{NUMBER}))")


def parse_benchmark_model(output: str) -> NativeRun:
    counts = [(int(m["count"]), {k: float(v) for k, v in FIELD.findall(m["rest"])})
              for m in COUNT_LINE.finditer(output)]
    if not counts:
        raise ValueError("no `count=... avg=...` line in the benchmark_model output")
    count, timed = counts[-1]  # the warm-up line comes first, the timed runs last
    notes = []
    if "median" in timed:
        p50 = timed["median"] / 1000
    else:
        p50 = None
        notes.append("this benchmark_model build prints no percentiles; p50 is unknown (mean given)")
    run = NativeRun(tool="benchmark_model", timed_runs=count, latency_ms=[], mean_ms=timed["avg"] / 1000, p50_ms=p50,
                    std_ms=timed.get("std", 0.0) / 1000, notes=notes)
    if (found := TIMINGS.search(output)) is not None:
        run.load_ms, run.first_run_ms = float(found["init"]) / 1000, float(found["first"]) / 1000
    elif (found := OLD_TIMINGS.search(output)) is not None:
        run.load_ms = float(found["init"]) / 1000
    if len(counts) > 1 and run.first_run_ms is None:
        run.first_run_ms = counts[0][1].get("first", 0.0) / 1000 or None
    peaks = [float(m["periodic"] or m["overall"]) for m in PEAK.finditer(output)]
    if peaks:
        run.tool_peak_memory_mb = max(peaks)
    return run


class BenchmarkModel(NativeRunner):
    runtime = "litert"
    tool = "benchmark_model"

    def command(self, binary: str, artifact: str, threads: int, warmup: int, runs: int,
                input_files: Sequence[str] = ()) -> list[str]:
        # min_secs=0 so the count is the asked number of runs, not "at least one second" of them
        argv = [binary, f"--graph={artifact}", f"--num_threads={threads}", f"--num_runs={runs}",
                f"--warmup_runs={max(warmup, 1)}", "--min_secs=0", "--warmup_min_secs=0",
                "--report_peak_memory_footprint=true"]
        return argv  # it feeds random inputs of the right shape and type; input_files are not used

    def parse(self, output: str, warmup: int) -> NativeRun:
        return parse_benchmark_model(output)


NATIVE_RUNNERS.register("litert")(BenchmarkModel())
