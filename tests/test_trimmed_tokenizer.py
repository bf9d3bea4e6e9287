"""Tokenizer files rewritten to a trimmed vocabulary's ids (the bundled MiniLM's WordPiece tokenizer, no model), a
BPE tokenizer left to the id map, and model.json's format version."""

import json
import shutil

import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.export.manifest import MANIFEST_FORMAT_VERSION, ModelManifest
from edgeprune.quantize.trimmed_tokenizer import rewrite_tokenizer_files
from edgeprune.quantize.vocabulary import vocabulary_from
from edgeprune.tasks import minilm_model_path

SEEN = ["markets rallied as the bank cut rates", "the minister resigned"]
UNSEEN = "zebras quizzically juxtapose xylophones in the bank"


def test_a_wordpiece_tokenizer_gives_the_trimmed_ids_for_any_text(tmp_path):
    from transformers import AutoTokenizer

    source = minilm_model_path()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(source / name, tmp_path / name)
    original = AutoTokenizer.from_pretrained(source)
    seen = original(SEEN, padding=True, return_tensors="pt")["input_ids"]
    vocabulary = vocabulary_from(seen.flatten(), list(original.all_special_ids), original.unk_token_id, len(original))
    rewrite = rewrite_tokenizer_files(tmp_path, vocabulary)
    assert rewrite.gives_artifact_ids and set(rewrite.rewritten) == {"tokenizer.json", "vocab.txt"}
    rewritten = AutoTokenizer.from_pretrained(tmp_path)
    for text in [*SEEN, UNSEEN]:
        expected = vocabulary.apply(original(text, padding="max_length", max_length=24, return_tensors="pt")
                                    ["input_ids"])
        assert torch.equal(rewritten(text, padding="max_length", max_length=24, return_tensors="pt")["input_ids"],
                           expected)
    assert max(rewritten(UNSEEN)["input_ids"]) < len(vocabulary.kept_ids)
    lines = (tmp_path / "vocab.txt").read_text().splitlines()
    assert lines == [(source / "vocab.txt").read_text().splitlines()[i] for i in vocabulary.kept_ids]


def test_a_bpe_tokenizer_is_left_to_the_id_map(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "abb": 4}
    tokenizer = Tokenizer(models.BPE(vocab, [("a", "b"), ("ab", "b")], unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    before = (tmp_path / "tokenizer.json").read_bytes()
    vocabulary = vocabulary_from(torch.tensor([3, 4]), [0], 0, len(vocab))
    rewrite = rewrite_tokenizer_files(tmp_path, vocabulary)
    assert not rewrite.gives_artifact_ids and rewrite.rewritten == [] and "BPE" in rewrite.note
    assert (tmp_path / "tokenizer.json").read_bytes() == before


def test_a_model_json_of_a_newer_format_is_refused_in_one_line(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"format_version": MANIFEST_FORMAT_VERSION + 1, "artifact": "model.pte"}))
    with pytest.raises(UserInputError, match="upgrade edgeprune"):
        ModelManifest.load(path)
    path.write_text("[1, 2]")
    with pytest.raises(UserInputError, match="is not a model.json"):
        ModelManifest.load(path)
