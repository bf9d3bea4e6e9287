"""`edgeprune quantize`, `export`, `bench` and `fit --runtime/--recipe`, run as a user runs them."""

import json

import pytest
import torch

from edgeprune.cli import main
from edgeprune.export import load_artifact

TINY = ["--max-length", "32", "--quiet"]


def test_export_litert_int8_then_bench_it(tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "model.tflite"
    assert main(["export", "--model", str(tiny_bert_dir), "--runtime", "litert", "--recipe", "litert-int8",
                 "--out", str(out), *TINY]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["recipe"] == "litert-int8" and summary["file_bytes"] == out.stat().st_size
    assert summary["min_cosine_to_pytorch"] >= 0.99 and 0 <= summary["validation_accuracy"] <= 1
    assert json.loads((tmp_path / "model.tflite.json").read_text()) == summary
    logits, embedding = load_artifact(out)(torch.full((1, 32), 2000), torch.ones(1, 32, dtype=torch.long))
    assert logits.shape == (1, 5) and embedding.shape == (1, 32)

    assert main(["bench", str(out), "--runs", "20", "--threads", "1", "--json", *TINY]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["runtime"] == "litert" and result["timed_runs"] == 20 and result["threads"] == 1
    assert 0 < result["p50_ms"] <= result["p90_ms"] and result["file_bytes"] == out.stat().st_size


def test_an_export_repeated_comes_from_the_export_cache_verified_and_byte_identical(tiny_bert_dir, tmp_path, capsys,
                                                                                    monkeypatch):
    monkeypatch.setenv("EDGEPRUNE_CACHE", str(tmp_path / "cache"))  # not the session's shared export cache
    summaries = []
    for name in ("first.tflite", "second.tflite"):
        assert main(["export", "--model", str(tiny_bert_dir), "--recipe", "litert-int8", "--out",
                     str(tmp_path / name), *TINY]) == 0
        summaries.append(json.loads(capsys.readouterr().out))
    assert [s["from_export_cache"] for s in summaries] == [False, True]
    assert (tmp_path / "first.tflite").read_bytes() == (tmp_path / "second.tflite").read_bytes()
    assert [p.suffix for p in (tmp_path / "cache" / "exports").iterdir() if p.suffix == ".tflite"] == [".tflite"]
    # the cached file is verified against PyTorch and evaluated as the first was
    assert summaries[1]["min_cosine_to_pytorch"] == summaries[0]["min_cosine_to_pytorch"] >= 0.99
    assert summaries[1]["validation_accuracy"] == summaries[0]["validation_accuracy"]


@pytest.mark.parametrize(("flags", "recipe"), [(["--recipe", "litert-int8"], "litert-int8"), ([], "litert-fp32")])
def test_export_takes_the_runtime_from_the_recipe_or_the_files_suffix(tiny_bert_dir, tmp_path, capsys, flags, recipe):
    out = tmp_path / "model.tflite"
    assert main(["export", "--model", str(tiny_bert_dir), *flags, "--out", str(out), *TINY]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["runtime"] == "litert" and summary["recipe"] == recipe


def test_quantize_saves_a_module_pytorch_can_run(tiny_bert_dir, tmp_path, capsys):
    out = tmp_path / "q.pt2"
    assert main(["quantize", "--model", str(tiny_bert_dir), "--recipe", "int8-emb4", "--out", str(out), *TINY]) == 0
    module = torch.export.load(out).module()
    logits, _ = module(torch.full((1, 32), 2000), torch.ones(1, 32, dtype=torch.long))
    assert logits.shape == (1, 5)
    assert json.loads((tmp_path / "q.json").read_text())["recipe"] == "int8-emb4"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "--runtime", "litert", "--recipe", "int8", "--out", "x.tflite"],
         "builds a executorch artifact, not litert"),
        (["export", "--runtime", "executorch", "--out", "x.tflite"], "executorch artifacts end in .pte"),
        (["export", "--recipe", "litert-int8", "--out", "x.pte"], "litert artifacts end in .tflite"),
        (["quantize", "--recipe", "litert-int8", "--out", "x.pt2"], "use `edgeprune export --runtime litert"),
        (["bench", "missing.pte"], "does not exist"),
        (["fit", "--max-mb", "30", "--runtime", "litert", "--recipe", "int8"],
         "this fit's runtimes are litert (add --runtime litert,executorch)"),
        (["fit", "--max-mb", "30", "--recipe", "int3"], "'int3' is not one of"),
    ],
)
def test_recipe_and_runtime_errors_are_one_line(argv, message, tiny_bert_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main([*argv, "--model", str(tiny_bert_dir), *TINY] if argv[0] != "bench" else [*argv, *TINY])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.glob("x.*"))
