"""The embedding task: sentence-transformers pooling honoured, cosine and neighbour agreement to the teacher."""

import json

import pytest
import torch
import torch.nn.functional as F

from edgeprune.errors import UserInputError
from edgeprune.pruning import prune_heads
from edgeprune.tasks import make_task
from edgeprune.tasks.base import batched_quality
from edgeprune.tasks.embedding import sentence_transformers_pooling
from edgeprune.tasks.metrics import neighbour_agreement
from tests._byo import topic_rows, write_jsonl


def sentence_transformers_folder(folder, pooling_key, normalize):
    (folder / "1_Pooling").mkdir(parents=True, exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({pooling_key: True, "word_embedding_dimension": 32}))
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (folder / "modules.json").write_text(json.dumps(modules))


def test_plain_encoders_mean_pool_and_sentence_transformers_folders_are_honoured(tiny_bert_dir, tmp_path):
    assert vars(sentence_transformers_pooling(tiny_bert_dir))["mode"] == "mean"
    folder = tmp_path / "st"
    folder.mkdir()
    sentence_transformers_folder(folder, "pooling_mode_cls_token", normalize=True)
    pooling = sentence_transformers_pooling(folder)
    assert pooling.mode == "cls" and pooling.normalize


def test_unsupported_sentence_transformers_modules_are_named(tmp_path):
    (tmp_path / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Dense", "path": "2"}]))
    with pytest.raises(UserInputError, match="Dense"):
        sentence_transformers_pooling(tmp_path)


def test_the_cls_normalized_embedding_is_what_the_model_returns(tiny_bert_dir, tmp_path):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(tiny_bert_dir, folder)
    sentence_transformers_folder(folder, "pooling_mode_cls_token", normalize=True)
    task = make_task("embedding", folder, write_jsonl(tmp_path / "d.jsonl", topic_rows()), max_length=16)
    teacher = task.teacher()
    ids, mask = task.example_inputs("test", 1)[0]
    (embedding,) = teacher.model(ids, mask)
    hidden = teacher.model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.allclose(embedding, F.normalize(hidden[:, 0], dim=-1), atol=1e-6)
    assert teacher.test.value == pytest.approx(1.0) and teacher.test.details["neighbour_agreement_at_5"] == 1.0


def test_pruning_lowers_cosine_and_the_contrastive_loss_scores_heads(tiny_bert_dir, tmp_path):
    task = make_task("embedding", tiny_bert_dir, write_jsonl(tmp_path / "d.jsonl", topic_rows()), max_length=16)
    assert not task.labelled and task.input_names == ("input_ids", "attention_mask")
    teacher = task.teacher()
    batch = next(task.batches("calibration", 6))
    loss = task.loss(teacher.model, batch)
    loss.backward()
    assert loss.item() > 0 and any(p.grad is not None and p.grad.abs().sum() > 0
                                   for p in teacher.model.parameters())
    pruned = make_task("embedding", tiny_bert_dir, tmp_path / "d.jsonl", max_length=16).teacher().model
    prune_heads(pruned.encoder, {layer: [0, 1, 2] for layer in range(3)})
    quality = task.quality(pruned, "test")
    data = task.encode("test")
    with torch.no_grad():
        expected = F.cosine_similarity(pruned(data["input_ids"], data["attention_mask"])[0],
                                       teacher.model(data["input_ids"], data["attention_mask"])[0], dim=-1)
    assert quality.metric == "cosine" and quality.value == pytest.approx(float(expected.mean()), abs=1e-6)
    assert quality.value < 1 and quality.details["min_cosine"] == pytest.approx(float(expected.min()), abs=1e-6)
    batched = batched_quality(task, pruned, "test", batch_size=4)  # what fit's PyTorch estimates use
    assert batched.examples == quality.examples and batched.value == pytest.approx(quality.value, abs=1e-6)


def test_neighbour_agreement_counts_shared_neighbours():
    reference = torch.tensor([[1.0, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]])
    assert neighbour_agreement(reference, reference, k=1) == 1.0
    swapped = torch.tensor([[1.0, 0], [0, 1], [0.9, 0.1], [0.1, 0.9]])  # items 1 and 2 trade places
    assert neighbour_agreement(swapped, reference, k=1) == 0.0
