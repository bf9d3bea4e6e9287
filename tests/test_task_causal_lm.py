"""The causal-LM task: documents split before blocking, perplexity equal to exp(mean next-token loss)."""

import math

import pytest
import torch
import torch.nn.functional as F

from edgeprune.errors import UserInputError
from edgeprune.tasks import make_task
from edgeprune.tasks.base import batched_quality, example_count, split_items
from tests._byo import tiny_llama_dir, topic_rows, write_jsonl


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    return tiny_llama_dir(tmp_path_factory.mktemp("llama"))


def long_rows():
    return [{"text": " ".join(row["text"] for row in topic_rows()[i:i + 6]), "label": ""} for i in range(0, 24, 2)]


def test_perplexity_is_exp_of_the_mean_next_token_loss(llama_dir, tmp_path):
    task = make_task("causal-lm", llama_dir, write_jsonl(tmp_path / "t.jsonl", long_rows()), max_length=16)
    assert task.input_names == ("input_ids",) and not task.labelled and task.vocabulary() is None
    teacher = task.teacher()
    ids = task.encode("test")["input_ids"]
    assert ids.shape[1] == 16 and ids.shape[0] >= 1
    with torch.no_grad():
        logits = teacher.model(ids)[0]
    expected = math.exp(float(F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))))
    assert teacher.test.metric == "perplexity" and not teacher.test.higher_is_better
    assert teacher.test.value == pytest.approx(expected, rel=1e-5)
    assert teacher.test.details["tokens"] == ids.shape[0] * 15
    loss = task.loss(teacher.model, {"input_ids": ids})
    assert math.exp(loss.item()) == pytest.approx(expected, rel=1e-5)
    # in batches (what fit's PyTorch estimates use): the same figure
    assert batched_quality(task, teacher.model, "test", batch_size=3).value == pytest.approx(expected, rel=1e-5)


def test_perplexity_reduces_each_block_as_it_comes_and_keeps_no_logits(llama_dir, tmp_path, monkeypatch):
    """A decoder's logits are vocabulary-wide (SmolLM2: 25 MB a block of 128): PyTorch estimates and the teacher's
    perplexity reduce each block to its loss instead of keeping the split's logits for `quality_from_outputs`
    (which a fit's estimates did, in batches of 32, since the tasks' helpers became functions)."""
    task = make_task("causal-lm", llama_dir, write_jsonl(tmp_path / "t.jsonl", long_rows()), max_length=16)
    model = task.dense_model()
    kept = {"validation": task.quality_from_outputs(
        [model(ids)[0].detach() for ids in task.encode("validation")["input_ids"].split(1)], "validation")}

    def keeps_every_output(outputs, split):
        raise AssertionError(f"{len(outputs)} blocks' logits kept for the {split} split")

    monkeypatch.setattr(task, "quality_from_outputs", keeps_every_output)
    for quality in (batched_quality(task, model, "validation"), task.quality(model, "validation"),
                    task.runtime_quality(lambda *inputs: [model(*inputs)[0]], "validation")):
        assert quality.value == pytest.approx(kept["validation"].value, rel=1e-5)
        assert quality.details["tokens"] == kept["validation"].details["tokens"]


def test_no_document_reaches_two_splits(llama_dir, tmp_path):
    task = make_task("causal-lm", llama_dir, write_jsonl(tmp_path / "t.jsonl", long_rows()), max_length=16)
    texts = {split: {item.text for item in split_items(task, split)} for split in ("calibration", "validation", "test")}
    assert not texts["calibration"] & texts["test"] and not texts["validation"] & texts["test"]


def test_a_split_shorter_than_one_block_is_a_clear_error(llama_dir, tmp_path):
    rows = [{"text": "tiny", "label": ""} for _ in range(6)]
    task = make_task("causal-lm", llama_dir, write_jsonl(tmp_path / "t.jsonl", rows), max_length=64)
    with pytest.raises(UserInputError, match="less than one block of --max-length 64"):
        task.encode("test")


def test_the_teacher_perplexity_is_measured_once_and_a_damaged_entry_is_measured_again(llama_dir, tmp_path):
    """The dense perplexities are kept in the teacher cache (SmolLM2: 72 s of every score, export or fit); the model
    itself is loaded each time, and an entry that is not whole is removed with one warning and measured again."""
    data = write_jsonl(tmp_path / "t.jsonl", long_rows())
    first = make_task("causal-lm", llama_dir, data, max_length=16).teacher()
    task = make_task("causal-lm", llama_dir, data, max_length=16)
    [entry] = [p for p in (task.cache_dir / "teachers").iterdir() if not p.name.startswith(".")]  # not its record
    task = make_task("causal-lm", llama_dir, data, max_length=16)
    measured = []
    task.quality = lambda model, split="test": measured.append(split)  # a second measurement would show here
    again = task.teacher()
    assert again.cached and not first.cached and measured == []
    assert (again.validation, again.test) == (first.validation, first.test)
    assert isinstance(again.model, torch.nn.Module)
    # another block length is another key: measured, not read
    other = make_task("causal-lm", llama_dir, data, max_length=12).teacher()
    assert not other.cached and other.test.details["tokens"] != first.test.details["tokens"]

    entry.write_bytes(entry.read_bytes()[:-5])  # cut short: its record no longer matches
    warnings = []
    task = make_task("causal-lm", llama_dir, data, max_length=16)
    task.progress.warn = warnings.append
    rebuilt = task.teacher()
    assert not rebuilt.cached and rebuilt.test == first.test
    assert len(warnings) == 1 and "damaged cache entry" in warnings[0]


def test_the_dense_model_alone_measures_nothing_and_is_the_teachers(llama_dir, tmp_path):
    """What score with a named criterion, export and quantize take: the teacher's model, no perplexity measured."""
    task = make_task("causal-lm", llama_dir, write_jsonl(tmp_path / "t.jsonl", long_rows()), max_length=16)
    measured = []
    task.quality = lambda model, split="test": measured.append(split)
    dense = task.dense_model()
    assert measured == [] and not list((task.cache_dir / "teachers").glob("*"))
    ids = task.encode("test")["input_ids"][:1]
    teacher = make_task("causal-lm", llama_dir, tmp_path / "t.jsonl", max_length=16).teacher()
    with torch.no_grad():
        assert torch.equal(dense(ids)[0], teacher.model(ids)[0])


def test_recovery_trains_on_more_calibration_blocks_than_scoring_reads(llama_dir, tmp_path):
    """`recovery_blocks` lengthens what recovery trains on (`recovery_examples`, read by `DistillData.from_task`),
    not the calibration split scoring reads, whose blocks stay the first of the recovery's; other splits keep
    `max_blocks`; the cap is part of the cache key (recovered weights depend on it)."""
    from edgeprune.recovery import DistillData

    data = write_jsonl(tmp_path / "t.jsonl", long_rows() * 4)
    plain = make_task("causal-lm", llama_dir, data, max_length=8, max_blocks=3)
    longer = make_task("causal-lm", llama_dir, data, max_length=8, max_blocks=3, recovery_blocks=7)
    assert example_count(plain, "calibration") == example_count(longer, "calibration") == 3
    assert torch.equal(plain.recovery_examples()["input_ids"], plain.encode("calibration")["input_ids"])
    recovery = longer.recovery_examples()["input_ids"]
    assert recovery.shape == (7, 8) and torch.equal(recovery[:3], longer.encode("calibration")["input_ids"])
    assert example_count(longer, "validation") == example_count(plain, "validation") == 3
    trained = torch.cat([batch["input_ids"] for batch in DistillData.from_task(longer, batch_size=2).train(0)])
    assert sorted(map(tuple, trained.tolist())) == sorted(map(tuple, recovery.tolist()))
    assert plain.cache_key() != longer.cache_key()
    assert longer.describe()["recovery_blocks"] == 7


@pytest.mark.parametrize("option", ["max_blocks", "recovery_blocks"])
def test_a_block_cap_must_be_a_positive_whole_number(llama_dir, tmp_path, option):
    data = write_jsonl(tmp_path / "t.jsonl", long_rows())
    with pytest.raises(UserInputError, match=f"{option} must be a whole number of blocks"):
        make_task("causal-lm", llama_dir, data, max_length=8, **{option: 0})
