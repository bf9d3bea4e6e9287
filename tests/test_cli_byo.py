"""Bring your own model and data through the CLI, as a team runs it: every data format, every task kind, the
project file, and every bad input as one clean line with exit code 2."""

import json

import pytest

from edgeprune.cli import main
from tests._byo import (
    tiny_classifier_dir,
    tiny_llama_dir,
    tiny_vit_dir,
    topic_rows,
    write_csv,
    write_image_folder,
    write_jsonl,
    write_text_folder,
)


def score(args, tmp_path, capsys):
    out = tmp_path / "scores.json"
    code = main(["score", "--examples", "8", "--max-length", "16", "--quiet", "--out", str(out), *args])
    captured = capsys.readouterr()
    return code, captured, (json.loads(out.read_text()) if out.exists() else None)


@pytest.mark.parametrize("writer,name", [(write_csv, "d.csv"), (write_jsonl, "d.jsonl"),
                                         (write_text_folder, "folder")])
def test_each_text_format_scores_heads(writer, name, tiny_bert_dir, tmp_path, capsys):
    data = writer(tmp_path / name, topic_rows())
    code, captured, scores = score(["--model", str(tiny_bert_dir), "--data", str(data)], tmp_path, capsys)
    assert code == 0, captured.err
    assert len(scores["scores"]) == 3 and len(scores["scores"][0]) == 4 and scores["num_examples"] == 8


def test_custom_columns_and_split_ratios(tiny_bert_dir, tmp_path, capsys):
    data = write_csv(tmp_path / "d.csv", topic_rows(), columns=("review", "stars"))
    code, captured, _ = score(["--model", str(tiny_bert_dir), "--data", str(data), "--text-column", "review",
                               "--label-column", "stars", "--split", "0.5,0.25,0.25"], tmp_path, capsys)
    assert code == 0, captured.err


@pytest.mark.parametrize("kind", ["embedding", "causal-lm", "image-classification"])
def test_each_task_kind_scores_heads(kind, tiny_bert_dir, tmp_path, capsys):
    if kind == "embedding":
        model, data = tiny_bert_dir, write_jsonl(tmp_path / "d.jsonl", topic_rows())
    elif kind == "causal-lm":
        model = tiny_llama_dir(tmp_path / "llama")
        data = write_jsonl(tmp_path / "d.jsonl", [{"text": " ".join(r["text"] for r in topic_rows()[i:i + 4])}
                                                  for i in range(0, 24, 2)])
    else:
        model, data = tiny_vit_dir(tmp_path / "vit"), write_image_folder(tmp_path / "images")
    code, captured, scores = score(["--task", kind, "--model", str(model), "--data", str(data)], tmp_path, capsys)
    assert code == 0, captured.err
    assert scores["num_examples"] > 0 and len(scores["scores"]) == 2 + (kind == "embedding")


def test_the_project_file_holds_options_and_flags_override_it(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    data = write_csv(tmp_path / "reviews.csv", topic_rows(), columns=("review", "label"))
    (tmp_path / "edgeprune.toml").write_text(
        f'model = "{tiny_bert_dir}"\ndata = "reviews.csv"\ntext_column = "review"\nmax_length = 16\n'
        '\n[score]\nexamples = 4\n')
    monkeypatch.chdir(tmp_path)
    code, captured, scores = score([], tmp_path, capsys)  # the flag --examples 8 overrides [score] examples = 4
    assert code == 0, captured.err and data.exists()
    assert scores["num_examples"] == 8
    code = main(["score", "--config", str(tmp_path / "edgeprune.toml"), "--examples", "2", "--quiet",
                 "--out", str(tmp_path / "s2.json")])
    assert code == 0 and json.loads((tmp_path / "s2.json").read_text())["num_examples"] == 2


def test_a_bad_project_file_is_one_clean_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edgeprune.toml").write_text('colour = "red"\n')
    assert main(["score", "--out", "x.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown key 'colour'" in err and "edgeprune.toml" in err
    (tmp_path / "edgeprune.toml").write_text('[fit]\nmax_mb = "huge"\n')
    assert main(["fit"]) == 2
    assert "fit.max_mb" in capsys.readouterr().err


def bad_inputs(tmp_path, tiny_bert_dir):
    rows = topic_rows()
    lonely = rows + [{"text": "a lonely example", "label": "weather"}]
    cases = {
        "missing file": (["--data", str(tmp_path / "nope.csv")], "does not exist"),
        "missing column": (["--data", str(write_csv(tmp_path / "c.csv", rows, ("body", "label")))],
                           "column"),
        "empty data": (["--data", str(write_jsonl(tmp_path / "e.jsonl", []))], "has no records"),
        "label only in test": (["--data", str(write_csv(tmp_path / "l.csv", lonely))], "weather"),
        "max length beyond positions": (["--data", str(write_csv(tmp_path / "m.csv", rows)), "--max-length", "65"],
                                        "beyond the 64 positions"),
        "head does not match": (["--model", str(tiny_classifier_dir(tmp_path / "clf", ["pos", "neg"])),
                                 "--data", str(write_csv(tmp_path / "h.csv", rows))], "--head fit"),
        "data without model": (["--model", "", "--data", str(write_csv(tmp_path / "n.csv", rows))], "model"),
        "bad split": (["--data", str(write_csv(tmp_path / "s.csv", rows)), "--split", "0.5,0.5"], "three numbers"),
    }
    return cases


def test_every_bad_input_is_one_line_exit_2_and_nothing_written(tiny_bert_dir, tmp_path, capsys):
    images = write_image_folder(tmp_path / "images")
    (images / "red" / "broken.png").write_bytes(b"\x89PNG but not really")
    cases = bad_inputs(tmp_path, tiny_bert_dir)
    cases["image that does not decode"] = (["--task", "image-classification", "--model",
                                            str(tiny_vit_dir(tmp_path / "vit")), "--data", str(images)], "broken.png")
    capsys.readouterr()  # model folders were written above
    for name, (args, expected) in cases.items():
        if "--model" not in args:
            args = ["--model", str(tiny_bert_dir), *args]
        if args[:2] == ["--model", ""]:
            args = args[2:]
        out = tmp_path / "fit-out"
        code = main(["fit", "--max-length", "16", "--quiet", "--out", str(out), *args])
        err = capsys.readouterr().err
        assert code == 2, f"{name}: exit {code}, {err}"
        assert err.count("\n") == 1 and err.startswith("edgeprune: error: ") and expected in err, f"{name}: {err}"
        assert not out.exists() and not list(tmp_path.glob(".fit-out.partial*")), name


def test_the_project_file_sets_the_search_space_and_paired_flags(tmp_path, monkeypatch):
    from edgeprune.cli import parse_options

    monkeypatch.chdir(tmp_path)
    (tmp_path / "edgeprune.toml").write_text('[fit]\ntrim-vocab = false\nffn-fractions = "0,0.5"\n'
                                             'layer-removals = "0"\nrequire-device = true\n')
    args = parse_options(["fit"])
    assert args["trim_vocab"] is False and args["ffn_fractions"] == (0.0, 0.5) and args["layer_removals"] == (0,)
    assert args["require_device"] is True
    assert parse_options(["fit", "--trim-vocab"])["trim_vocab"] is True  # a flag overrides the file
    (tmp_path / "edgeprune.toml").write_text("no-trim-vocab = true\n")
    assert parse_options(["fit"])["trim_vocab"] is False
    (tmp_path / "edgeprune.toml").write_text("trim-vocab = true\n")
    assert parse_options(["fit"])["trim_vocab"] is True
    (tmp_path / "edgeprune.toml").write_text("")
    assert parse_options(["fit"])["trim_vocab"] is None  # searched both ways
