"""`edgeprune score` and `edgeprune prune` as a user runs them: scores and plans as JSON, real surgery."""

import json

import torch

import edgeprune
from edgeprune.cli import main
from edgeprune.models import adapter_for


def test_score_then_prune_then_reapply_the_plan(tiny_bert_dir, tmp_path, capsys):
    scores_file = tmp_path / "scores.json"
    assert main(["score", "--model", str(tiny_bert_dir), "--criterion", "gate-gradient", "--examples", "16",
                 "--max-length", "32", "--out", str(scores_file), "--quiet"]) == 0
    scores = json.loads(scores_file.read_text())
    assert scores["criterion"] == "gate-gradient" and len(scores["scores"]) == 3 and len(scores["scores"][0]) == 4
    assert scores["num_examples"] == 16

    assert main(["prune", "--model", str(tiny_bert_dir), "--scores", str(scores_file), "--remove", "5",
                 "--examples", "16", "--max-length", "32", "--out", str(tmp_path / "pruned"), "--quiet"]) == 0
    assert "removed 5 of 12 heads (their mean outputs folded into the output bias)" in capsys.readouterr().out
    pruned = edgeprune.load(tmp_path / "pruned")
    assert sum(b.num_heads for b in adapter_for(pruned).attention_blocks(pruned)) == 7
    plan = json.loads((tmp_path / "pruned" / "plan.json").read_text())
    assert plan["heads_removed"] == 5 and plan["criterion"] == "gate-gradient"

    assert main(["prune", "--model", str(tiny_bert_dir), "--plan", str(tmp_path / "pruned" / "plan.json"),
                 "--examples", "16", "--max-length", "32", "--out", str(tmp_path / "again"), "--quiet"]) == 0
    again = edgeprune.load(tmp_path / "again")
    for (name, a), (_, b) in zip(pruned.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_prune_per_layer_and_threshold(tiny_bert_dir, tmp_path):
    scores = {"scores": [[0.1, 0.2, 0.3, 0.4]] * 3, "criterion": "handmade", "num_examples": 1}
    (tmp_path / "s.json").write_text(json.dumps(scores))
    assert main(["prune", "--model", str(tiny_bert_dir), "--scores", str(tmp_path / "s.json"), "--strategy",
                 "per-layer", "--remove-per-layer", "2", "--no-compensate", "--out", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "a" / "plan.json").read_text())["kept_heads"] == [[2, 3]] * 3
    assert main(["prune", "--model", str(tiny_bert_dir), "--scores", str(tmp_path / "s.json"), "--strategy",
                 "threshold", "--threshold", "0.35", "--no-normalize", "--no-compensate", "--out",
                 str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "plan.json").read_text())["kept_heads"] == [[3]] * 3


def test_prune_errors_are_one_line(tiny_bert_dir, tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "odd.json").write_text(json.dumps({"kept": []}))
    cases = [
        (["--scores", str(tmp_path / "missing.json"), "--remove", "1"], "does not exist"),
        (["--scores", str(tmp_path / "bad.json"), "--remove", "1"], "not valid JSON"),
        (["--plan", str(tmp_path / "odd.json")], "does not hold what edgeprune wrote"),
    ]
    for extra, message in cases:
        code = main(["prune", "--model", str(tiny_bert_dir), *extra, "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    scores = {"scores": [[0.1, 0.2, 0.3, 0.4]] * 3, "criterion": "handmade", "num_examples": 1}
    (tmp_path / "s.json").write_text(json.dumps(scores))
    code = main(["prune", "--model", str(tiny_bert_dir), "--scores", str(tmp_path / "s.json"),
                 "--out", str(tmp_path / "o")])
    assert code == 2 and "needs --remove" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
