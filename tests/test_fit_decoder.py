"""A grouped-query decoder through `fit` as a user runs it: every plan the fit makes (the scoring comparison's
probe, each candidate, the most compressed one) removes whole KV groups or the same number of query heads from
every group, and the counts the search reports are the ones removed."""

import contextlib
import io
import json
import subprocess
import sys

import pytest

from edgeprune.cli import main
from edgeprune.models.llama import gqa_removal_is_valid
from tests._byo import tiny_llama_dir, topic_rows, write_jsonl
from tests.test_fit_integration import NO_RECOVERY


def decoder_data(folder):
    rows = topic_rows()
    return write_jsonl(folder / "text.jsonl", [{"text": " ".join(r["text"] for r in rows[i:i + 4])}
                                               for i in range(0, 24, 2)])


def fit_tiny_gqa(folder, *flags: str):  # noqa: ANN001, ANN201 - a Path; (exit code, result JSON, out folder)
    """`edgeprune fit` as a user types it on a tiny grouped-query Llama (8 query heads over 2 KV heads per layer) and
    text of its own, heads only, no recovery, budgets of 7.925 MB and 1 decode token/s, plus `flags`."""
    model = tiny_llama_dir(folder / "llama", heads=8, kv_heads=2)
    out, printed = folder / "fit", io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setenv("EDGEPRUNE_CACHE", str(folder / "cache"))
        code = main(["fit", *NO_RECOVERY,
                     "--task", "causal-lm", "--model", str(model), "--data", str(decoder_data(folder)),
                     "--max-length", "16", "--device", "host", "--max-mb", "7.925", "--min-decode-tps", "1",
                     *flags, "--ffn-fractions", "0", "--layer-removals", "0", "--scoring-examples", "8", "--quiet",
                     "--json", "--out", str(out)])
    return code, json.loads(printed.getvalue()), out


@pytest.fixture(scope="module")
def gqa_fit(tmp_path_factory):
    """A probe at half the removable heads (7) cannot split evenly between the two layers' KV groups, which crashed
    fit before its plans snapped to whole groups."""
    return fit_tiny_gqa(tmp_path_factory.mktemp("gqa-fit"), "--max-memory-mb", "4096", "--max-ttft-ms", "5000",
                        "--prompt-tokens", "6", "--recipe", "fp32")


def test_a_gqa_decoder_fits_through_the_cli(gqa_fit):
    code, result, out = gqa_fit
    assert code == 0, result["message"]
    assert (out / "model.pte").exists() and result["fitted"]["file_bytes"] <= 7.925e6
    # the artifact is a KV-cached generator, benchmarked as one
    generation = json.loads((out / "generation.json").read_text())
    assert generation["context"] == 64 and generation["decode"] and generation["ttft_ms"] > 0
    assert generation["artifact"] == "model.pte"  # the shipped file, not the staging folder's
    assert "generation.json" in result["shipped_files"] and (out / "generation.md").exists()
    assert result["generation"] == generation  # result.json keeps it, and report.html charts it
    assert 'id="plot-generation"' in (out / "report.html").read_text()
    # on the host the program attends with ExecuTorch's LLM kernels (--attention auto), and is timed with them
    from edgeprune.export import load_artifact

    assert load_artifact(out / "model.pte").constants()["use_sdpa_with_kv_cache"] is True


def test_every_candidate_is_timed_decoding_and_held_to_the_decode_budget(gqa_fit):
    _, result, out = gqa_fit
    assert result["budget"]["min_decode_tps"] == 1
    benchmark = result["fitted"]["benchmark"]
    assert benchmark["decode_p50_ms"] > 0
    check = next(c for c in result["fitted"]["checks"] if c["kind"] == "decode")
    assert check["passed"] and check["unit"] == "tokens/s"
    assert abs(check["value"] - 1e3 / benchmark["decode_p50_ms"]) < 1e-6
    assert "decode, one token after the prompt" in (out / "report.md").read_text()


def test_the_time_to_first_token_is_timed_on_its_own_prompt_and_held_to_its_budget(gqa_fit):
    _, result, out = gqa_fit
    assert result["budget"]["max_ttft_ms"] == 5000 and result["task"]["prompt_tokens"] == 6
    benchmark = result["fitted"]["benchmark"]
    check = next(c for c in result["fitted"]["checks"] if c["kind"] == "ttft")
    assert check["passed"] and check["value"] == benchmark["ttft_p50_ms"] > 0
    assert benchmark["ttft_p50_ms"] != benchmark["p50_ms"]  # a 6-token prefill timed apart from the 16-token one
    assert "time to first token, 6-token prompt" in (out / "report.md").read_text()
    assert result["reproduce"]["task"]["prompt_tokens"] == 6


def test_the_memory_budget_counts_the_kv_cache_at_the_full_context(gqa_fit):
    """Cache pages are resident only once written: the slots the timed prefill (16 tokens) and decode step (at
    position 16) left unwritten, of a context of 64, are added to what the benchmark measured."""
    from edgeprune.export import load_artifact

    _, result, out = gqa_fit
    benchmark = result["fitted"]["benchmark"]
    kv_bytes = load_artifact(out / "model.pte").constants()["get_kv_cache_bytes"]
    assert benchmark["kv_unwritten_mb"] == round(kv_bytes * (64 - 17) / 64 / 1e6, 3) > 0
    check = next(c for c in result["fitted"]["checks"] if c["kind"] == "memory")
    measured = benchmark["peak_rss_mb"] - benchmark["rss_before_load_mb"]
    assert abs(check["value"] - (max(measured, 0.0) + benchmark["kv_unwritten_mb"])) < 1e-9
    assert "KV cache the timed calls left unwritten" in (out / "report.md").read_text()


def test_the_report_gives_next_token_agreement_with_the_dense_teacher(gqa_fit):
    _, result, out = gqa_fit
    dense, fitted = result["dense"]["teacher_agreement"], result["fitted"]["teacher_agreement"]
    assert (fitted["prompt_tokens"], fitted["new_tokens"]) == (16, 32) and 1 <= fitted["prompts"] <= 8
    assert 0 <= fitted["agreement"] <= 1
    assert dense["agreement"] >= 0.9  # the fp32 program is PyTorch's model, token for token up to near-ties
    assert "next-token agreement with the dense teacher" in (out / "report.md").read_text()


@pytest.mark.parametrize("flags", [["--max-ttft-ms", "50"], ["--prompt-tokens", "8"]])
def test_a_prompt_budget_on_an_encoder_is_one_line(tmp_path, capsys, flags):
    code = main(["fit", "--device", "host", "--max-mb", "30", *flags, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("a generator's budget" in err) if flags[0] == "--max-ttft-ms" else ("sets a causal-lm generator's prompt"
                                                                             in err)


def test_a_decode_budget_on_an_encoder_is_one_line(tmp_path, capsys):
    code = main(["fit", "--device", "host", "--min-decode-tps", "10", "--out", str(tmp_path / "fit")])
    err = capsys.readouterr().err
    assert code == 2 and "--min-decode-tps is a generator's budget; task minilm-bbc is not a causal-lm" in err


def test_every_plan_of_the_fit_is_valid_grouped_query(gqa_fit):
    _, result, _ = gqa_fit
    kept = result["fitted"]["plan"]["heads"]["kept_heads"]
    for layer in kept:
        assert gqa_removal_is_valid(8, 2, [h for h in range(8) if h not in layer]) is None
    removed = result["fitted"]["plan"]["heads"]["heads_removed"]
    assert removed == 16 - sum(len(layer) for layer in kept)
    # each candidate's reported count is a count whole groups allow (even per layer of 8 heads in 2 groups)
    counts = [trial["heads_removed"] for trial in result["trials"]]
    assert counts and all(count % 2 == 0 for count in counts) and removed in counts


def test_model_json_describes_the_generator_and_usage_md_generates_as_written(gqa_fit):
    from transformers import AutoTokenizer

    from edgeprune.export.manifest import ModelManifest
    from edgeprune.export.usage import EXAMPLE_PROMPT, NEW_TOKENS, USAGE_NAME
    from edgeprune.generation import CacheLayout
    from edgeprune.generation.runner import Generator

    _, result, out = gqa_fit
    generator = ModelManifest.load(out / "model.json").generator
    kept = result["fitted"]["plan"]["heads"]["kept_heads"]
    # 2 (K and V) × Σ KV heads kept (a quarter of each layer's query heads kept: GQA 8 over 2) × head_dim 4 × fp32
    per_token = 2 * sum(len(layer) // 4 for layer in kept) * 4 * 4
    assert generator.context == 64 and generator.max_seq_len == 16 and generator.attention == "fast"
    assert generator.kv_bytes_per_token == per_token and generator.kv_cache_bytes == per_token * 64
    assert CacheLayout((1,), (4,), 64).bytes_per_token == 32  # the same rule, one layer of one KV head
    program = (out / USAGE_NAME).read_text().split("```python\n", 1)[1].split("```", 1)[0]
    assert "custom_ops" in program  # a fast program's kernels load first
    completed = subprocess.run([sys.executable, "-c", program], cwd=out, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    printed = json.loads(completed.stdout.strip().splitlines()[-1])
    prompt = AutoTokenizer.from_pretrained(out)(EXAMPLE_PROMPT, add_special_tokens=False)["input_ids"]
    assert printed["prompt_tokens"] == len(prompt)
    assert printed["tokens"] == Generator(out / "model.pte").generate(prompt, NEW_TOKENS)


def test_the_fit_times_decode_where_the_chart_against_context_needs_it():
    from edgeprune.search.generator_figures import chart_depths

    assert chart_depths(512) == (128, 256, 384)  # 1024 is past the context; 3/4 leaves 128 slots to decode
    assert chart_depths(2048) == (128, 512, 1024, 1536)
    assert chart_depths(64) == (32,)  # a context too short for any: half way


def test_the_dense_baseline_takes_the_teachers_perplexity_which_its_program_gives(gqa_fit):
    """A generator's dense fp32 program that computes PyTorch's function, prefilling and decoding, is not run over
    the splits (minutes on SmolLM2): its validation and test perplexity are the teacher's in PyTorch, and
    result.json and the reports say so. Run through the program here, it gives the same."""
    from edgeprune.export import load_artifact
    from edgeprune.report.facts import format_metric
    from edgeprune.tasks import make_task

    _, result, out = gqa_fit
    dense = result["dense"]
    assert dense["quality_source"].startswith("PyTorch")
    assert dense["quality"] == result["teacher_quality"] and dense["validation_quality"]["split"] == "validation"
    task = make_task("causal-lm", out.parent / "llama", out.parent / "text.jsonl", max_length=16)
    for split, quality in (("validation", dense["validation_quality"]), ("test", dense["quality"])):
        through_program = task.runtime_quality(load_artifact(out / dense["path"]), split)
        assert through_program.value == pytest.approx(quality["value"], rel=1e-4), split
    report, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "The dense baseline's perplexity is the teacher's in PyTorch (its fp32 program checked" in report
    assert f"| {format_metric(dense['quality']['value'], 'perplexity')} (PyTorch) |" in report
    assert "the dense baseline&#39;s in PyTorch (its fp32 program checked to compute the same" in page
    assert "the chosen artifact through the runtime, the dense baseline in PyTorch" in page


def test_a_program_that_decodes_unlike_pytorch_is_measured_through_its_runtime(gqa_fit, tmp_path):
    """The check behind adopting the teacher's perplexity runs the program's cache: the same fp32 program against
    a teacher whose weights moved no longer decodes like it, so it would be measured, not adopted."""
    import torch

    from edgeprune.search.generator_figures import decode_cosine
    from edgeprune.tasks import make_task

    _, result, out = gqa_fit
    task = make_task("causal-lm", out.parent / "llama", out.parent / "text.jsonl", max_length=16)
    teacher = task.dense_model().eval()
    program = out / result["dense"]["path"]
    assert decode_cosine(task, program, teacher) >= 0.99999
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    assert decode_cosine(task, program, teacher) < 0.99
