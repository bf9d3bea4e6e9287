"""The folder a fit ships, as an app developer uses it: model.json read from the artifact, tokenizer files whose ids
are the trimmed artifact's, the dense baseline kept apart in baseline/, a USAGE.md program that runs as written, and
`edgeprune bench` that builds its inputs from model.json or from the program alone (real runtimes throughout)."""

import contextlib
import io
import json
import shutil
import subprocess
import sys

import pytest
import torch

from edgeprune.cli import main
from edgeprune.export import export, load_artifact
from edgeprune.export.manifest import ModelManifest, file_sha256, inspect_artifact
from edgeprune.export.usage import EXAMPLE_TEXT, USAGE_NAME, usage_markdown
from edgeprune.quantize.vocabulary import VocabularyMap
from edgeprune.serialization import to_jsonable
from tests.test_fit_integration import NO_RECOVERY

pytestmark = pytest.mark.integration

FAST = ["--max-length", "32", "--scoring-examples", "32", "--quiet"]
BENCH = ["--threads", "1", "--runs", "5", "--warmup", "1", "--quiet", "--json"]
SENTENCES = ["Shares in the bank rose after the government announced the sale.",  # words of the BBC data
             "Zebras quizzically juxtapose xylophones"]  # pieces the trimmed vocabulary never saw


@pytest.fixture(scope="module")
def shipped(small_bert_dir, tmp_path_factory):
    """A fit with a trimmed vocabulary on a small random BERT: the folder and what it printed."""
    folder = tmp_path_factory.mktemp("handoff")
    out, printed = folder / "fit", io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        patch.setenv("EDGEPRUNE_CACHE", str(folder / "cache"))
        code = main(["fit", *NO_RECOVERY,
                     "--model", str(small_bert_dir), "--max-mb", "5", "--trim-vocab", "--recipe", "int8",
                     "--out", str(out), "--json", *FAST])
    result = json.loads(printed.getvalue())
    assert code == 0, result["message"]
    return out, result


def test_a_trimmed_fit_measures_through_the_map(shipped):
    out, result = shipped
    assert result["fitted"]["plan"]["heads"]["heads_removed"] == 0
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    kept = len(vocabulary["kept_ids"])
    assert result["fitted"]["vocabulary_size"] == kept < 2104 and result["dense"]["vocabulary_size"] is None
    assert 0 <= result["fitted"]["test_accuracy"] <= 1 and result["fitted"]["verification"]["min_cosine"] >= 0.999
    # the artifact's embedding table has exactly the kept rows: an id past them is out of range
    run = load_artifact(out / "model.pte")
    assert run(torch.full((1, 32), kept - 1), torch.ones(1, 32, dtype=torch.long))[0].shape == (1, 5)


def test_model_json_is_read_from_the_artifact_and_round_trips(shipped):
    out, result = shipped
    manifest = ModelManifest.load(out / "model.json")
    assert to_jsonable(manifest) == json.loads((out / "model.json").read_text())
    assert manifest.artifact == "model.pte" and manifest.sha256 == file_sha256(out / "model.pte")
    assert manifest.file_bytes == (out / "model.pte").stat().st_size == result["fitted"]["file_bytes"]
    from importlib.metadata import version

    assert (manifest.runtime.name, manifest.runtime.version) == ("executorch", version("executorch"))
    assert [(s.name, s.shape, s.dtype) for s in manifest.inputs] == [("input_ids", [1, 32], "int64"),
                                                                      ("attention_mask", [1, 32], "int64")]
    assert [(s.name, s.shape, s.dtype) for s in manifest.outputs] == [("logits", [1, 5], "float32"),
                                                                      ("embedding", [1, 128], "float32")]
    kept = result["fitted"]["vocabulary_size"]
    low, high = manifest.inputs[0].value_range
    assert 0 <= low <= high < kept  # token ids as the trimmed artifact takes them
    assert "XnnpackBackend" in manifest.delegates and all("::" in op for op in manifest.operators)
    assert manifest.tokenizer.gives_artifact_ids and manifest.tokenizer.id_map is None
    assert manifest.tokenizer.trimmed_vocabulary_size == kept
    assert set(manifest.files) == {"USAGE.md", "labels.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"}
    assert sorted(result["shipped_files"]) == sorted([*manifest.files, "model.json"])


def test_the_dense_baseline_lives_in_baseline_with_its_own_model_json(shipped):
    out, result = shipped
    assert not list(out.glob("dense-fp32*")) and result["dense"]["path"] == "baseline/dense-fp32.pte"
    baseline = ModelManifest.load(out / "baseline" / "model.json")
    assert baseline.artifact == "dense-fp32.pte" and baseline.sha256 == file_sha256(out / "baseline/dense-fp32.pte")
    assert baseline.recipe == "fp32" and baseline.tokenizer is None
    assert baseline.inputs[0].value_range[1] >= result["fitted"]["vocabulary_size"]  # original ids: not trimmed


def test_the_shipped_tokenizer_gives_the_artifacts_ids_without_a_map(shipped, small_bert_dir, tmp_path):
    from transformers import AutoTokenizer, BertTokenizerFast

    out, _ = shipped
    original, rewritten = AutoTokenizer.from_pretrained(small_bert_dir), AutoTokenizer.from_pretrained(out)
    vocabulary = VocabularyMap.load(out / "vocabulary.json")
    run = load_artifact(out / "model.pte")
    for sentence in SENTENCES:
        before = original(sentence, padding="max_length", max_length=32, truncation=True, return_tensors="pt")
        after = rewritten(sentence, padding="max_length", max_length=32, truncation=True, return_tensors="pt")
        mapped = vocabulary.apply(before["input_ids"])
        assert torch.equal(after["input_ids"], mapped) and torch.equal(after["attention_mask"],
                                                                       before["attention_mask"])
        for got, want in zip(run(after["input_ids"], after["attention_mask"]),
                             run(mapped, before["attention_mask"]), strict=True):
            assert torch.equal(got, want)
    assert vocabulary.unk_id != vocabulary.kept_ids.index(vocabulary.unk_id)  # the ids really moved
    assert (mapped == vocabulary.kept_ids.index(vocabulary.unk_id)).any()  # the second sentence has unknown pieces
    # vocab.txt: the kept tokens by artifact id; a WordPiece over it agrees on words the data showed
    lines = (out / "vocab.txt").read_text().splitlines()
    assert len(lines) == len(vocabulary.kept_ids)
    alone = tmp_path / "vocab-only"
    alone.mkdir()
    shutil.copy(out / "vocab.txt", alone)
    words = BertTokenizerFast.from_pretrained(alone)
    assert words(SENTENCES[0])["input_ids"] == vocabulary.apply(
        torch.tensor(original(SENTENCES[0])["input_ids"])).tolist()


def test_usage_md_runs_as_written_and_gives_the_artifacts_output(shipped, small_bert_dir):
    from transformers import AutoTokenizer

    out, _ = shipped
    program = (out / USAGE_NAME).read_text().split("```python\n", 1)[1].split("```", 1)[0]
    completed = subprocess.run([sys.executable, "-c", program], cwd=out, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    printed = json.loads(completed.stdout.strip().splitlines()[-1])
    tokens = AutoTokenizer.from_pretrained(small_bert_dir)(EXAMPLE_TEXT, padding="max_length", max_length=32,
                                                            truncation=True, return_tensors="pt")
    ids = VocabularyMap.load(out / "vocabulary.json").apply(tokens["input_ids"])
    logits = load_artifact(out / "model.pte")(ids, tokens["attention_mask"])[0]
    assert printed["values"] == pytest.approx(logits.flatten().tolist(), abs=1e-6)
    labels = json.loads((out / "labels.json").read_text())["labels"]
    assert printed["label"] == labels[int(logits.argmax())] and printed["shape"] == [1, 5]


def test_bench_of_the_shipped_artifact_builds_its_inputs_from_model_json(shipped, tmp_path, capsys):
    out, _ = shipped
    assert main(["bench", str(out / "model.pte"), "--out", str(tmp_path), *BENCH]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["timed_runs"] == 5 and printed["p50_ms"] > 0
    assert any(note.startswith("inputs: input_ids int64 [1, 32], attention_mask int64 [1, 32], seeded random")
               and "model.json" in note for note in printed["notes"])


class Tiny(torch.nn.Module):
    """One float input [1, 64], two outputs: nothing like the bundled MiniLM."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(64, 8)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.linear(features).relu(), features.sum(-1)


@pytest.fixture(scope="module", params=["fp32", "litert-fp32"], ids=["pte", "tflite"])
def tiny_program(request, tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp(f"tiny-{request.param}")
    suffix = ".pte" if request.param == "fp32" else ".tflite"
    return export(Tiny().eval(), (torch.randn(1, 64),), folder / f"tiny{suffix}", request.param).path


def test_bench_of_any_program_reads_its_inputs_from_the_program(tiny_program, capsys):
    assert main(["bench", str(tiny_program), *BENCH]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["timed_runs"] == 5 and printed["file_bytes"] == tiny_program.stat().st_size
    name = "input_0" if tiny_program.suffix == ".pte" else "args_0"
    assert f"inputs: {name} float32 [1, 64] from the program's own metadata" in printed["notes"][-1]


@pytest.mark.parametrize("tiny_program", ["litert-fp32"], indirect=True)  # the logic is the same for .pte
def test_bench_takes_a_model_json_only_when_it_describes_that_file(tiny_program, tmp_path, capsys):
    folder = tmp_path / "app"
    folder.mkdir()
    artifact = folder / tiny_program.name
    artifact.write_bytes(tiny_program.read_bytes())
    manifest = inspect_artifact(artifact)
    manifest.inputs[0].name, manifest.inputs[0].value_range = "features", [-1.0, 1.0]
    manifest.save(folder / "model.json")
    assert main(["bench", str(artifact), *BENCH]) == 0
    assert "inputs: features float32 [1, 64], seeded random values" in json.loads(capsys.readouterr().out)["notes"][-1]
    manifest.sha256 = "0" * 64  # a model.json of another build of the file
    manifest.save(folder / "model.json")
    assert main(["bench", str(artifact), *BENCH]) == 0
    note = json.loads(capsys.readouterr().out)["notes"][-1]
    assert "from the program's own metadata" in note and "sha256 differs" in note


def test_bench_with_task_inputs_the_program_does_not_take_is_one_line_exit_2(tiny_program, tiny_bert_dir, capsys):
    code = main(["bench", str(tiny_program), "--model", str(tiny_bert_dir), "--max-length", "32", *BENCH])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "float32 [1, 64]; the task gives int64 [1, 32], int64 [1, 32]" in err


@pytest.mark.parametrize("tiny_program", ["litert-fp32"], indirect=True)  # the logic is the same for .pte
def test_usage_program_for_a_program_without_a_tokenizer_runs(tiny_program, tmp_path):
    manifest = inspect_artifact(tiny_program)
    (tmp_path / tiny_program.name).write_bytes(tiny_program.read_bytes())
    manifest.save(tmp_path / "model.json")
    program = usage_markdown(manifest).split("```python\n", 1)[1].split("```", 1)[0]
    completed = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    printed = json.loads(completed.stdout.strip().splitlines()[-1])
    expected = load_artifact(tiny_program)(torch.zeros(1, 64))[0]  # the program feeds zeros of model.json's shapes
    assert printed["shape"] == [1, 8] and printed["values"] == pytest.approx(expected.flatten().tolist(), abs=1e-6)
