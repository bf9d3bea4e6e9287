"""report.md: dense vs fitted, side by side, every figure labelled with where it came from."""

import json
from pathlib import Path

from edgeprune.report.facts import (
    budget_rows,
    emulation_note,
    format_mb,
    format_quality,
    metric_name,
    runtime_summary,
    teacher_quality,
    test_quality,
    verdict,
)
from edgeprune.search.result import BuiltArtifact, FitResult
from edgeprune.search.scoring import scoring_decision


def _heads_kept(artifact: BuiltArtifact) -> int | str:
    heads = artifact.plan.heads
    return "—" if heads is None else sum(map(len, heads.kept_heads))


def _row(label: str, dense: str, fitted: str) -> str:
    return f"| {label} | {dense} | {fitted} |"


def _bench(artifact: BuiltArtifact, field: str, fmt: str) -> str:
    value = None if artifact.benchmark is None else getattr(artifact.benchmark, field)
    return "not measured" if value is None else fmt.format(value)


def _added_memory(artifact: BuiltArtifact) -> str:
    bench = artifact.benchmark
    if bench is None or bench.peak_rss_mb is None or bench.rss_before_load_mb is None:
        return "not measured"
    return f"{bench.peak_rss_mb - bench.rss_before_load_mb:.0f} MB"


def _runtimes(dense: BuiltArtifact, fitted: BuiltArtifact) -> str:
    return dense.recipe.runtime if dense.recipe.runtime == fitted.recipe.runtime else (
        f"{dense.recipe.runtime} / {fitted.recipe.runtime}")


def _budget_table(result: FitResult) -> list[str]:
    rows = budget_rows(result)
    if not rows:
        return ["No budget was set.", ""]
    lines = [f"| budget | limit | {result.fitted.label} | source | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {r.name} (`{r.flag}`) | {r.limit} | {r.value} | {r.source} | {verdict(r)} |" for r in rows]
    return [*lines, ""]


def render_markdown(result: FitResult) -> str:
    dense, fitted = result.dense, result.fitted
    bench = fitted.benchmark or dense.benchmark
    speedup = (dense.benchmark.p50_ms / fitted.benchmark.p50_ms
               if dense.benchmark and fitted.benchmark and fitted.benchmark.p50_ms else None)
    metric = metric_name(result)
    source = "measured" if bench is None or bench.measured else f"ESTIMATED, {bench.device} not connected"
    if bench is not None and bench.measured and bench.emulated:
        source = f"measured, {bench.emulated}"
    lines = [
        f"# edgeprune fit: {result.task['name']} on {result.device} — {result.status}",
        "",
        f"**{result.status}** — {result.message}",
        "",
        *([f"**Emulated** — {emulation_note(result)}", ""] if emulation_note(result) else []),
        *_budget_table(result),
        f"Elapsed {result.elapsed_s:.0f} s. Validation qualities within {result.quality_tolerance:.4f} of the best "
        "counted as a tie, won by the least compressed candidate.",
        "",
        f"| | dense ({dense.recipe.name}, {Path(dense.path).suffix}) | fitted |",
        "|---|---|---|",
        _row("recipe", dense.recipe.name, fitted.recipe.name),
        _row("heads kept", str(_heads_kept(dense)), str(_heads_kept(fitted))),
        _row("structure", "dense", fitted.describe()),
        _row("parameters", f"{dense.parameters:,}", f"{fitted.parameters:,}"),
        _row("file size (measured)", format_mb(dense.file_bytes), format_mb(fitted.file_bytes)),
        _row("file size (size model)", format_mb(dense.predicted_bytes), format_mb(fitted.predicted_bytes)),
        _row(f"latency p50 ({source})", _bench(dense, "p50_ms", "{:.1f} ms"), _bench(fitted, "p50_ms", "{:.1f} ms")),
        _row(f"latency p90 ({source})", _bench(dense, "p90_ms", "{:.1f} ms"), _bench(fitted, "p90_ms", "{:.1f} ms")),
        _row(f"load time ({source})", _bench(dense, "load_ms", "{:.1f} ms"), _bench(fitted, "load_ms", "{:.1f} ms")),
        *([_row(f"decode, one token after the prompt ({source})", _bench(dense, "decode_tokens_per_s",
                                                                          "{:.1f} tokens/s"),
                _bench(fitted, "decode_tokens_per_s", "{:.1f} tokens/s"))]
          if fitted.benchmark is not None and fitted.benchmark.decode_p50_ms else []),
        *([_row(f"time to first token, {result.task.get('prompt_tokens')}-token prompt ({source})",
                _bench(dense, "ttft_p50_ms", "{:.1f} ms"), _bench(fitted, "ttft_p50_ms", "{:.1f} ms"))]
          if fitted.benchmark is not None and fitted.benchmark.ttft_p50_ms else []),
        _row(f"peak RSS of benchmark process ({source})", _bench(dense, "peak_rss_mb", "{:.0f} MB"),
             _bench(fitted, "peak_rss_mb", "{:.0f} MB")),
        _row(f"RSS before load ({source})", _bench(dense, "rss_before_load_mb", "{:.0f} MB"),
             _bench(fitted, "rss_before_load_mb", "{:.0f} MB")),
        _row("memory the artifact adds (peak − before load)", _added_memory(dense), _added_memory(fitted)),
        *([_row("KV cache the timed calls left unwritten (the memory budget adds it: the cache at the full context)",
                _bench(dense, "kv_unwritten_mb", "{:.1f} MB"), _bench(fitted, "kv_unwritten_mb", "{:.1f} MB"))]
          if fitted.benchmark is not None and fitted.benchmark.kv_unwritten_mb is not None else []),
        _row(f"test {metric} through {_runtimes(dense, fitted)} (measured"
             + ("; the dense baseline's in PyTorch, below" if dense.quality_source else "") + ")",
             format_quality(test_quality(dense)) + (" (PyTorch)" if dense.quality_source else ""),
             format_quality(test_quality(fitted))),
        *([_row(f"next-token agreement with the dense teacher ({fitted.teacher_agreement.prompts} test prompts, "
                f"{fitted.teacher_agreement.new_tokens} greedy tokens each)", _agreement(dense), _agreement(fitted))]
          if fitted.teacher_agreement is not None else []),
        _row("cosine to its PyTorch source (worst of "
             f"{fitted.verification.num_inputs})", f"{dense.verification.min_cosine:.6f}",
             f"{fitted.verification.min_cosine:.6f}"),
        "",
        f"Dense teacher in PyTorch: test {metric} {format_quality(teacher_quality(result))} "
        f"on {(result.task.get('split_sizes') or {}).get('test', 'the')} test examples.",
    ]
    if dense.quality_source:
        lines.append(f"The dense baseline's {metric} is the teacher's in {dense.quality_source}: a pass over the "
                     "splits through it would only repeat it.")
    if fitted.recovery:
        lines.append(f"Fitted model recovered: {fitted.recovery}.")
    if result.recovery is not None:
        lines.append(result.recovery.describe())
    if speedup is not None:
        lines.append(f"Fitted p50 speed-up over the dense fp32 artifact: {speedup:.2f}× (same run, same threads).")
    runtimes = runtime_summary(result)
    if runtimes:
        lines += ["", runtimes]
    scoring = scoring_decision(result.head_scores)
    if scoring is not None:
        text = scoring.describe()
        lines += ["", text[0].upper() + text[1:] + "."]
    if bench is not None:
        lines += ["", f"Benchmarks: {bench.device}, runtime {bench.runtime}, {bench.threads} threads, "
                  f"{bench.warmup_runs} warm-up and {bench.timed_runs} timed runs, each artifact in its own process."]
        error = result.latency_model_error()
        if error.count:
            lines.append(f"Latency model, predicted before each benchmark: {error.describe()}.")
    lines += ["", "## Kept heads per layer", "", "| layer | kept | heads |", "|---|---|---|"]
    heads = fitted.plan.heads
    for layer, (total, kept) in enumerate(zip(heads.num_heads, heads.kept_heads, strict=True) if heads else ()):
        if layer in fitted.layers_removed:
            lines.append(f"| {layer} | 0/{total} | layer removed |")
        else:
            lines.append(f"| {layer} | {len(kept)}/{total} | {', '.join(map(str, kept))} |")
    lines += ["", "## Candidates considered", "",
              "| recipe | structure | PyTorch estimate | predicted | file | fits | note |",
              "|---|---|---|---|---|---|---|"]
    for trial in result.trials:
        file = format_mb(trial.file_bytes) if trial.file_bytes is not None else "not exported"
        fits = {True: "yes", False: "no", None: "—"}[trial.fits]
        estimate = "—" if trial.estimated_quality is None else f"{trial.estimated_quality:.4f}"
        lines.append(f"| {trial.recipe} | {trial.describe()} | {estimate} | {format_mb(trial.predicted_bytes)} | "
                     f"{file} | {fits} | {trial.note} |")
    lines += ["", "## Reproduce", "", "```json"]
    lines += [json.dumps(result.reproduce, indent=2), "```", ""]
    return "\n".join(lines)


def _agreement(artifact: BuiltArtifact) -> str:
    return "—" if artifact.teacher_agreement is None else f"{artifact.teacher_agreement.agreement:.1%}"
