"""Vocabulary trimming: a smaller table gives the same outputs for kept tokens; others become unknown."""

import torch

from edgeprune.models.classifier import EncoderClassifier
from edgeprune.quantize.vocabulary import VocabularyMap, trim_vocabulary, vocabulary_from
from tests.conftest import tiny_bert


def _model():
    torch.manual_seed(0)
    return EncoderClassifier(tiny_bert(), torch.nn.Linear(32, 5)).eval()


def test_trimmed_model_on_mapped_ids_equals_the_full_model(tmp_path):
    seen = torch.tensor([[101, 2000, 2001, 2050, 102]])
    vocabulary = vocabulary_from(seen, special_ids=[0, 101, 102, 103], unk_id=100, original_size=30522)
    assert vocabulary.kept_ids == [0, 100, 101, 102, 103, 2000, 2001, 2050]
    full, trimmed = _model(), trim_vocabulary(_model(), vocabulary)
    assert trimmed.encoder.get_input_embeddings().num_embeddings == 8 and trimmed.encoder.config.vocab_size == 8
    mask = torch.ones_like(seen)
    with torch.no_grad():
        torch.testing.assert_close(trimmed(vocabulary.apply(seen), mask)[1], full(seen, mask)[1])
        # a token never seen is read as [UNK]
        unseen = torch.tensor([[101, 2000, 7777, 102, 0]])
        as_unknown = torch.tensor([[101, 2000, 100, 102, 0]])
        torch.testing.assert_close(trimmed(vocabulary.apply(unseen), mask)[1], full(as_unknown, mask)[1])
    vocabulary.save(tmp_path / "v.json")
    assert VocabularyMap.load(tmp_path / "v.json") == vocabulary


def test_trimming_removes_exactly_the_dropped_rows():
    vocabulary = vocabulary_from(torch.arange(1000, 1100), [0, 100, 101, 102], 100, 30522)
    full = sum(p.numel() for p in _model().parameters())
    trimmed = sum(p.numel() for p in trim_vocabulary(_model(), vocabulary).parameters())
    assert full - trimmed == (30522 - 104) * 32
