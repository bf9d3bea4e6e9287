"""ExecuTorch `executor_runner` (examples/portable/executor_runner).

It logs through ET_LOG (`I 00:00:00.012345 executorch:executor_runner.cpp:NNN] ...` on stderr):
`Model loaded in X ms.`, one `Iteration i of N: X ms` per execution, then `Model executed
successfully N time(s) in X ms.`; older builds print only the total line. edgeprune's own runner
(executor_runner.cpp) then prints `Peak resident set: N kB` from getrusage. It has no warm-up flag, so
the first execution and the warm-up ones are dropped from the timed samples.
"""

import re
import statistics
from collections.abc import Sequence

from edgeprune.bench.native.base import NATIVE_RUNNERS, NativeRun, NativeRunner

NUMBER = r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
LOADED = re.compile(rf"Model loaded in ({NUMBER}) ms")
ITERATION = re.compile(rf"Iteration (\d+) of (\d+): ({NUMBER}) ms")
TOTAL = re.compile(rf"Model executed successfully (\d+) time\(s\) in ({NUMBER}) ms")
PEAK_RSS = re.compile(r"^Peak resident set: (\d+) kB", re.MULTILINE)  # edgeprune's runner only (getrusage)


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def parse_executor_runner(output: str, skip: int = 1) -> NativeRun:
    """Figures from the log; the first `skip` executions (first run and warm-up) are not timed samples."""
    total = TOTAL.search(output)
    if total is None:
        raise ValueError("no `Model executed successfully N time(s) in X ms` line in the executor_runner output")
    executions, total_ms = int(total.group(1)), float(total.group(2))
    loaded = LOADED.search(output)
    peak = PEAK_RSS.search(output)
    peak_mb = int(peak.group(1)) / 1024 if peak else None
    iterations = {int(i): float(ms) for i, _, ms in ITERATION.findall(output)}
    if len(iterations) == executions and executions > skip:
        ordered = [iterations[i] for i in range(1, executions + 1)]
        timed = ordered[skip:]
        return NativeRun(tool="executor_runner", timed_runs=len(timed), latency_ms=timed,
                         mean_ms=statistics.fmean(timed), p50_ms=_percentile(timed, 50), p90_ms=_percentile(timed, 90),
                         p99_ms=_percentile(timed, 99), std_ms=statistics.pstdev(timed), first_run_ms=ordered[0],
                         load_ms=float(loaded.group(1)) if loaded else None, process_peak_rss_mb=peak_mb)
    return NativeRun(tool="executor_runner", timed_runs=executions, latency_ms=[], mean_ms=total_ms / executions,
                     p50_ms=None, load_ms=float(loaded.group(1)) if loaded else None, process_peak_rss_mb=peak_mb,
                     notes=["this executor_runner build logs no per-iteration times: the mean covers every "
                            "execution, the first and warm-up ones included, and p50 is unknown"])


class ExecutorRunner(NativeRunner):
    runtime = "executorch"
    tool = "executor_runner"

    def command(self, binary: str, artifact: str, threads: int, warmup: int, runs: int,
                input_files: Sequence[str] = ()) -> list[str]:
        argv = [binary, f"--model_path={artifact}", f"--num_executions={1 + warmup + runs}",
                f"--cpu_threads={threads}"]
        if input_files:
            argv.append(f"--inputs={','.join(input_files)}")
        return argv

    def parse(self, output: str, warmup: int) -> NativeRun:
        return parse_executor_runner(output, skip=1 + warmup)


NATIVE_RUNNERS.register("executorch")(ExecutorRunner())
