"""`edgeprune distill` as a user runs it: a pruned tiny BERT recovered from its dense teacher; one-line errors."""

import json

import pytest
import torch

import edgeprune.cli
from edgeprune.models import adapter_for
from edgeprune.models.io import load, save
from edgeprune.pruning import prune_heads


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def pruned_dir(tiny_bert_dir, tmp_path):
    model = prune_heads(load(tiny_bert_dir), {0: [0, 1], 2: [3]})
    return save(model, tmp_path / "pruned")


def test_distill_writes_a_loadable_recovered_model_and_its_result(tiny_bert_dir, pruned_dir, tmp_path, capsys):
    out = tmp_path / "recovered"
    code = edgeprune.cli.main(["distill", "--model", str(pruned_dir), "--teacher-model", str(tiny_bert_dir),
                               "--max-length", "16", "--max-steps", "3", "--eval-every", "3", "--train-limit", "32",
                               "--validation-limit", "32", "--learning-rate", "1e-3", "--out", str(out), "--quiet"])
    assert code == 0
    assert "distilled 3 steps (max_steps); validation accuracy" in capsys.readouterr().out
    report = json.loads((out / "distill.json").read_text())
    assert report["result"]["steps"] == 3 and report["result"]["config"]["learning_rate"] == 1e-3
    assert report["result"]["metric"] == "accuracy" and len(report["result"]["history"]) == 2
    recovered = load(out)
    assert [b.num_heads for b in adapter_for(recovered).attention_blocks(recovered)] == [2, 4, 3]
    assert (out / "classifier.pt").exists() and (out / "vocab.txt").exists()


def test_distill_errors_are_one_line_with_exit_2(tiny_bert_dir, pruned_dir, tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "unknown.json").write_text(json.dumps({"temprature": 3}))
    (tmp_path / "invalid.json").write_text(json.dumps({"temperature": -1}))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    base = ["--teacher-model", str(tiny_bert_dir), "--max-length", "16"]
    cases = [
        (["--model", str(tmp_path / "missing"), "--out", str(tmp_path / "o")], "does not exist"),
        (["--model", str(pruned_dir), "--distill-config", str(tmp_path / "none.json"), "--out", str(tmp_path / "o")],
         "does not exist"),
        (["--model", str(pruned_dir), "--distill-config", str(tmp_path / "bad.json"), "--out", str(tmp_path / "o")],
         "not valid JSON"),
        (["--model", str(pruned_dir), "--distill-config", str(tmp_path / "unknown.json"), "--out", str(tmp_path / "o")],
         "unknown fields"),
        (["--model", str(pruned_dir), "--distill-config", str(tmp_path / "invalid.json"), "--out", str(tmp_path / "o")],
         "temperature must be > 0"),
        (["--model", str(pruned_dir), "--max-steps", "0", "--out", str(tmp_path / "o")], "max_steps must be at least"),
        (["--model", str(pruned_dir), "--out", str(tmp_path / "full")], "not empty"),
        (["--model", str(pruned_dir), "--batch-size", "0", "--out", str(tmp_path / "o")], "--batch-size"),
        (["--model", str(pruned_dir), "--max-steps", "many", "--out", str(tmp_path / "o")], "is not a valid integer"),
    ]
    for extra, message in cases:
        code = edgeprune.cli.main(["distill", *base, *extra])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (extra, err)
        assert not (tmp_path / "o").exists()


def test_distill_removes_a_layer_and_ffn_neurons_then_recovers(tiny_bert_dir, pruned_dir, tmp_path, capsys):
    from edgeprune.pruning.ffn import intermediate_sizes

    out = tmp_path / "smaller"
    code = edgeprune.cli.main(["distill", "--model", str(pruned_dir), "--teacher-model", str(tiny_bert_dir),
                               "--max-length", "16", "--max-steps", "2", "--eval-every", "2", "--train-limit", "32",
                               "--validation-limit", "32", "--remove-layers", "1", "--ffn-ratio", "0.25",
                               "--scoring-batches", "2", "--hidden-weight", "1", "--out", str(out), "--quiet"])
    assert code == 0
    report = json.loads((out / "distill.json").read_text())
    removed = report["removed_layers"]
    assert len(removed) == 1 and report["layer_map"] == [i for i in range(3) if i not in removed]
    assert report["result"]["config"]["layer_map"] == report["layer_map"]  # hidden alignment against kept layers
    assert report["intermediate_sizes"] == [48, 48] and report["ffn_criterion"] == "activation"
    printed = capsys.readouterr().out
    assert f"removed layers {removed}; FFN widths [48, 48]; distilled 2 steps (max_steps)" in printed
    recovered = load(out)
    heads = {0: 2, 1: 4, 2: 3}  # from pruned_dir
    assert [b.num_heads for b in adapter_for(recovered).attention_blocks(recovered)] == [
        heads[i] for i in report["layer_map"]]
    assert intermediate_sizes(recovered) == [48, 48] and recovered.config.num_hidden_layers == 2


def test_ffn_only_with_the_weight_norm_criterion(tiny_bert_dir, pruned_dir, tmp_path, capsys):
    from edgeprune.pruning.ffn import intermediate_sizes

    out = tmp_path / "narrow"
    code = edgeprune.cli.main(["distill", "--model", str(pruned_dir), "--teacher-model", str(tiny_bert_dir),
                               "--max-length", "16", "--max-steps", "1", "--eval-every", "1", "--train-limit", "16",
                               "--validation-limit", "16", "--ffn-ratio", "0.5", "--ffn-criterion", "weight-norm",
                               "--out", str(out), "--quiet"])
    assert code == 0
    report = json.loads((out / "distill.json").read_text())
    assert "removed_layers" not in report and report["intermediate_sizes"] == [32, 32, 32]
    assert "FFN widths [32, 32, 32]; distilled 1 steps" in capsys.readouterr().out
    recovered = load(out)
    assert intermediate_sizes(recovered) == [32, 32, 32]
    assert [b.num_heads for b in adapter_for(recovered).attention_blocks(recovered)] == [2, 4, 3]


def test_layer_and_ffn_option_errors_are_one_line_with_exit_2(tiny_bert_dir, pruned_dir, tmp_path, capsys):
    base = ["distill", "--model", str(pruned_dir), "--teacher-model", str(tiny_bert_dir), "--max-length", "16",
            "--out", str(tmp_path / "o")]
    cases = [
        (["--remove-layers", "3"], "--remove-layers 3: the model has 3 layers, so 1..2 can go"),
        (["--remove-layers", "-1"], "--remove-layers must be >= 0, got -1"),
        (["--remove-layers", "two"], "is not a valid integer"),
        (["--ffn-ratio", "1"], "--ffn-ratio must be a share of neurons in [0, 1), got 1.0"),
        (["--ffn-ratio", "-0.1"], "--ffn-ratio must be a share of neurons in [0, 1)"),
        (["--ffn-ratio", "nan"], "'nan' must be a finite number"),
        (["--ffn-ratio", "half"], "is not a number"),
        (["--ffn-ratio", "0.5", "--ffn-criterion", "taylor"], "'taylor' is not one of"),
        (["--remove-layers", "1", "--scoring-batches", "0"], "--scoring-batches must be at least 1"),
    ]
    for extra, message in cases:
        code = edgeprune.cli.main([*base, *extra])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, (extra, err)
        assert not (tmp_path / "o").exists()


def test_distill_recovers_a_pruned_decoder_with_the_tasks_own_settings(tmp_path, capsys):
    """A pruned grouped-query decoder through `edgeprune distill --task smollm2-bbc --teacher-model ...`: its folder
    loads with the heads it was pruned to, and it was distilled with the decoder's settings (learning rate,
    temperature, no next-token loss, batches of 2 blocks), not the encoder defaults the help shows."""
    from edgeprune.models.classifier import CausalLMLogits
    from tests._byo import tiny_llama_dir

    teacher = tiny_llama_dir(tmp_path / "llama", heads=4, kv_heads=2)
    pruned = save(prune_heads(load(teacher), {0: [0, 1], 1: [1, 3]}), tmp_path / "pruned", source=teacher)
    out = tmp_path / "recovered"
    code = edgeprune.cli.main(["distill", "--task", "smollm2-bbc", "--teacher-model", str(teacher), "--model",
                               str(pruned), "--max-length", "16", "--max-steps", "3", "--eval-every", "3",
                               "--train-limit", "24", "--out", str(out), "--json", "--quiet"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["steps"] == 3 and summary["metric"] == "neg_kl"
    record = json.loads((out / "distill.json").read_text())
    config = record["result"]["config"]
    assert (config["learning_rate"], config["temperature"], config["task_weight"]) == (3e-4, 1.0, 0.0)
    assert record["task"] == "smollm2-bbc" and record["student"] == str(pruned)
    recovered = load(out)
    assert [block.num_heads for block in adapter_for(recovered).attention_blocks(recovered)] == [2, 2]
    assert (out / "tokenizer.json").is_file() or (out / "vocab.txt").is_file()  # the folder tokenizes alone
    before, after = load(pruned).state_dict(), recovered.state_dict()
    assert any(not torch.equal(before[name], after[name]) for name in before)  # distilled, not copied
    ids = torch.arange(3, 19)[None]
    with torch.no_grad():
        assert CausalLMLogits(recovered)(ids)[0].shape == (1, 16, recovered.config.vocab_size)
