"""A small Markdown report of one benchmark: every figure with where it came from."""

from pathlib import Path

from edgeprune.bench.benchmark import BenchmarkResult


def _ms(value: float | None) -> str:
    return "not reported by the tool" if value is None else f"{value:.2f} ms"


def _mb(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.0f} MB"


def _temperatures(before: dict[str, float], after: dict[str, float]) -> list[str]:
    if not before and not after:
        return ["No thermal sensor was readable on the device."]
    lines = ["| sensor | before | after |", "|---|---|---|"]
    for name in sorted(set(before) | set(after)):
        cells = [f"{side[name]:.1f} °C" if name in side else "—" for side in (before, after)]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")
    return lines


def render_bench_markdown(result: BenchmarkResult, artifact: Path, connection: str) -> str:
    if result.energy_mj_per_inference is None:
        energy = "not available"
    else:
        energy = f"{result.energy_mj_per_inference:.2f} mJ ({result.energy_source})"
    lines = [
        f"# edgeprune bench: {Path(artifact).name} on {result.device}",
        "",
        f"Measured on {result.device} through {connection} with {result.runner} "
        f"({result.runtime}, {result.threads} threads): {result.warmup_runs} warm-up and "
        f"{result.timed_runs} timed runs.",
        "",
        *([f"**{result.emulated}**: these timings are the emulator's and say nothing about a real board; "
           "do not compare them with, or scale them into, a real device's figures.", ""] if result.emulated else []),
        "| figure | value |",
        "|---|---|",
        f"| file size | {result.file_mb:.2f} MB |",
        f"| latency p50 | {_ms(result.p50_ms)} |",
        f"| latency p90 | {_ms(result.p90_ms)} |",
        f"| latency p99 | {_ms(result.p99_ms)} |",
        f"| latency mean | {result.mean_ms:.2f} ms |",
        f"| coefficient of variation | {100 * result.cv:.2f} % |",
        f"| first run | {_ms(result.first_run_ms)} |",
        f"| load time | {_ms(result.load_ms)} |",
        f"| peak RSS of the benchmark process | {_mb(result.peak_rss_mb)} |",
        f"| RSS before the program loads | {_mb(result.rss_before_load_mb)} |",
        f"| energy per inference, above idle | {energy} |",
        f"| throttled | {'**yes**' if result.throttled else 'no'} |",
        "",
        f"Energy: {result.energy_detail}",
        "",
        "## Thermal state",
        "",
        *_temperatures(result.thermal_before_c, result.thermal_after_c),
    ]
    if result.throttle_reasons:
        lines += ["", "Throttling:", "", *[f"- {reason}" for reason in result.throttle_reasons]]
    if result.notes:
        lines += ["", "Notes:", "", *[f"- {note}" for note in result.notes]]
    return "\n".join(lines) + "\n"
