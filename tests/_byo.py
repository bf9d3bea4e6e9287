"""Small real data sets and model folders for the bring-your-own tests, written to temporary folders."""

import csv
import json
import shutil
from pathlib import Path

import torch

from edgeprune.tasks import minilm_model_path
from tests.conftest import TOKENIZER_FILES

TOPICS = {"sport": ["match", "goal", "team", "league", "coach", "season"],
          "money": ["bank", "market", "shares", "profit", "loan", "prices"],
          "music": ["album", "band", "song", "concert", "singer", "chart"]}


def topic_rows(per_topic: int = 8) -> list[dict[str, str]]:
    rows = []
    for label, words in TOPICS.items():
        for i in range(per_topic):
            text = f"the {words[i % 6]} and the {words[(i + 2) % 6]} were in the news on day {i}"
            rows.append({"text": text, "label": label})
    return rows


def write_csv(path: Path, rows: list[dict[str, str]], columns: tuple[str, str] = ("text", "label")) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([row["text"], row["label"]])
    return path


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def write_text_folder(folder: Path, rows: list[dict[str, str]]) -> Path:
    for i, row in enumerate(rows):
        (folder / row["label"]).mkdir(parents=True, exist_ok=True)
        (folder / row["label"] / f"{i:03d}.txt").write_text(row["text"])
    return folder


def copy_tokenizer(folder: Path) -> None:
    for name in TOKENIZER_FILES:
        source = minilm_model_path() / name
        if source.exists():
            shutil.copy(source, folder / name)


def tiny_classifier_dir(folder: Path, labels: list[str], seed: int = 0) -> Path:
    """A tiny BERT with its own sequence-classification head naming `labels`."""
    from transformers import BertForSequenceClassification

    from tests.conftest import tiny_bert_config

    torch.manual_seed(seed)
    config = tiny_bert_config(num_labels=len(labels), id2label=dict(enumerate(labels)),
                              label2id={label: i for i, label in enumerate(labels)})
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    copy_tokenizer(folder)
    return folder


def tiny_llama_dir(folder: Path, seed: int = 0, heads: int = 4, kv_heads: int = 2, layers: int = 2,
                   vocab_size: int = 30522) -> Path:
    """A tiny random Llama (grouped-query attention) with the MiniLM word-piece tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=64,
                         head_dim=32 // heads, attn_implementation="eager", pad_token_id=0, eos_token_id=102,
                         bos_token_id=101)
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    copy_tokenizer(folder)
    return folder


def write_image_folder(folder: Path, per_class: int = 6, size: int = 16) -> Path:
    """Generated images: red-ish, green-ish and blue-ish squares with noise, one folder per colour."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for channel, name in enumerate(("red", "green", "blue")):
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 80, size=(size, size, 3), dtype=np.uint8)
            pixels[..., channel] = rng.integers(160, 256, size=(size, size), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / name / f"{i}.png")
    return folder


def tiny_vit_dir(folder: Path, labels: list[str] | None = None, seed: int = 0) -> Path:
    """A tiny ViT: with an image-classification head naming `labels`, or a plain encoder when None."""
    from transformers import ViTConfig, ViTForImageClassification, ViTModel

    torch.manual_seed(seed)
    options = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
                   patch_size=4, attn_implementation="eager")
    if labels is None:
        ViTModel(ViTConfig(**options)).eval().save_pretrained(folder)
    else:
        config = ViTConfig(num_labels=len(labels), id2label=dict(enumerate(labels)),
                           label2id={label: i for i, label in enumerate(labels)}, **options)
        ViTForImageClassification(config).eval().save_pretrained(folder)
    return folder
