"""report.md: dense vs fitted, side by side, every figure labelled with where it came from."""

import json
from pathlib import Path

from edgeprune.search.result import BuiltArtifact, FitResult


def _mb(value: int) -> str:
    return f"{value / 1e6:.2f} MB"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f} %"


def _row(label: str, dense: str, fitted: str) -> str:
    return f"| {label} | {dense} | {fitted} |"


def _bench(artifact: BuiltArtifact, field: str, fmt: str) -> str:
    if artifact.benchmark is None:
        return "not measured"
    return fmt.format(getattr(artifact.benchmark, field))


def _added_memory(artifact: BuiltArtifact) -> str:
    if artifact.benchmark is None:
        return "not measured"
    return f"{artifact.benchmark.peak_rss_mb - artifact.benchmark.rss_before_load_mb:.0f} MB"


def render_markdown(result: FitResult) -> str:
    dense, fitted = result.dense, result.fitted
    bench = fitted.benchmark or dense.benchmark
    speedup = (dense.benchmark.p50_ms / fitted.benchmark.p50_ms
               if dense.benchmark and fitted.benchmark and fitted.benchmark.p50_ms else None)
    lines = [
        f"# edgeprune fit: {result.task['name']} on {result.device}",
        "",
        f"**{result.status}** — {result.message}",
        "",
        f"Budget: max {result.budget.max_mb} MB. Elapsed {result.elapsed_s:.0f} s.",
        "",
        f"| | dense ({dense.recipe}, {Path(dense.path).suffix}) | fitted |",
        "|---|---|---|",
        _row("recipe", dense.recipe, fitted.recipe),
        _row("heads kept", str(sum(map(len, dense.plan["kept_heads"]))), str(sum(map(len, fitted.plan["kept_heads"])))),
        _row("parameters", f"{dense.parameters:,}", f"{fitted.parameters:,}"),
        _row("file size (measured)", _mb(dense.file_bytes), _mb(fitted.file_bytes)),
        _row("file size (size model)", _mb(dense.predicted_bytes), _mb(fitted.predicted_bytes)),
        _row("latency p50 (measured)", _bench(dense, "p50_ms", "{:.1f} ms"), _bench(fitted, "p50_ms", "{:.1f} ms")),
        _row("latency p90 (measured)", _bench(dense, "p90_ms", "{:.1f} ms"), _bench(fitted, "p90_ms", "{:.1f} ms")),
        _row("load time (measured)", _bench(dense, "load_ms", "{:.1f} ms"), _bench(fitted, "load_ms", "{:.1f} ms")),
        _row("peak RSS of benchmark process (measured)", _bench(dense, "peak_rss_mb", "{:.0f} MB"),
             _bench(fitted, "peak_rss_mb", "{:.0f} MB")),
        _row("RSS before load (measured)", _bench(dense, "rss_before_load_mb", "{:.0f} MB"),
             _bench(fitted, "rss_before_load_mb", "{:.0f} MB")),
        _row("memory the artifact adds (peak − before load)", _added_memory(dense), _added_memory(fitted)),
        _row(f"test accuracy through {result.reproduce['runtime']} (measured)", _pct(dense.test_accuracy),
             _pct(fitted.test_accuracy)),
        _row("cosine to its PyTorch source (worst of "
             f"{fitted.verification.num_inputs})", f"{dense.verification.min_cosine:.6f}",
             f"{fitted.verification.min_cosine:.6f}"),
        "",
        f"Dense teacher in PyTorch: test accuracy {_pct(result.teacher_test_accuracy)} "
        f"on {result.task['split_sizes']['test']} test documents.",
    ]
    if speedup is not None:
        lines.append(f"Fitted p50 speed-up over the dense fp32 artifact: {speedup:.2f}× (same run, same threads).")
    if bench is not None:
        lines += ["", f"Benchmarks: {bench.device}, runtime {bench.runtime}, {bench.threads} threads, "
                  f"{bench.warmup_runs} warm-up and {bench.timed_runs} timed runs, each artifact in its own process."]
    lines += ["", "## Kept heads per layer", "", "| layer | kept | heads |", "|---|---|---|"]
    for layer, (total, kept) in enumerate(zip(fitted.plan["num_heads"], fitted.plan["kept_heads"], strict=True)):
        lines.append(f"| {layer} | {len(kept)}/{total} | {', '.join(map(str, kept))} |")
    lines += ["", "## Candidates considered", "", "| recipe | heads removed | predicted | file | fits | note |",
              "|---|---|---|---|---|---|"]
    for trial in result.trials:
        file = _mb(trial.file_bytes) if trial.file_bytes is not None else "not exported"
        fits = {True: "yes", False: "no", None: "—"}[trial.fits]
        lines.append(f"| {trial.recipe} | {trial.heads_removed} | {_mb(trial.predicted_bytes)} | {file} | {fits} | "
                     f"{trial.note} |")
    lines += ["", "## Reproduce", "", "```json"]
    lines += [json.dumps(result.reproduce, indent=2), "```", ""]
    return "\n".join(lines)
