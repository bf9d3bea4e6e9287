"""Shared fixtures: tiny random models (fast) and an isolated cache."""

import shutil
from pathlib import Path

import pytest
import torch

from edgeprune.tasks import minilm_model_path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def tiny_bert_config(**overrides):
    from transformers import BertConfig

    options = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                   intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    options.update(overrides)
    return BertConfig(**options)


def tiny_bert(seed: int = 0, **overrides):
    from transformers import BertModel

    torch.manual_seed(seed)
    return BertModel(tiny_bert_config(**overrides)).eval()


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A tiny random BERT saved as a Hugging Face folder with the real MiniLM tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    tiny_bert().save_pretrained(folder)
    for name in TOKENIZER_FILES:
        source = minilm_model_path() / name
        if source.exists():
            shutil.copy(source, folder / name)
    return folder


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEPRUNE_CACHE", str(tmp_path / "cache"))
