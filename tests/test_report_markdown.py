"""report.md: the same budget verdicts and labels as report.html, and no crash on figures a benchmark lacks."""

from edgeprune.report import render_html, render_markdown
from edgeprune.report.facts import budget_rows
from edgeprune.search.budget import Budget
from tests.test_report_html import TEACHER_VALIDATION, fit_result


def test_the_budget_table_matches_the_html_report_row_for_row():
    budget = Budget(max_mb=20, max_memory_mb=150, max_latency_ms=12, min_quality=0.95, memory_measure="process")
    result = fit_result(budget=budget)
    report, page = render_markdown(result), render_html(result)
    rows = budget_rows(result)
    assert [r.flag for r in rows] == ["--max-mb", "--max-latency-ms", "--max-memory-mb", "--min-quality"]
    assert [r.passed for r in rows] == [True, True, False, False]  # 180 MB peak RSS; 94.40 % < 95 %
    for row in rows:
        verdict = "pass" if row.passed else "fail"
        assert f"| {row.name} (`{row.flag}`) | {row.limit} | {row.value} | {row.source} | {verdict} |" in report
        assert f"<td>{row.limit}</td><td>{row.value}</td>" in page


def test_a_native_benchmark_without_samples_or_memory_reads_not_measured():
    result = fit_result(budget=Budget(max_mb=20, max_memory_mb=150))
    bench = result.fitted.benchmark
    bench.latency_ms, bench.p90_ms, bench.p99_ms, bench.load_ms = [], None, None, None
    bench.peak_rss_mb, bench.rss_before_load_mb = None, None
    result.fitted.checks = result.budget.check(result.fitted.file_bytes, bench, result.fitted.validation_quality,
                                               TEACHER_VALIDATION)
    report = render_markdown(result)
    assert "| latency p90 (measured) | 32.0 ms | not measured |" in report
    assert "| memory the artifact adds (`--max-memory-mb`) | 150 MB | not measured | not measured | fail |" in report
    assert 'class="aggregate"' in render_html(result)  # the p50 it did report, drawn without samples


def test_a_task_without_split_sizes_still_renders():
    """A module task given tensors directly records no split sizes."""
    result = fit_result()
    result.task = {"name": "my-module", "kind": "module", "metric": "accuracy"}
    assert "test examples" in render_markdown(result)
