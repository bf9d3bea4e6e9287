"""Shared pieces of the importance-criterion tests: a tiny classifier and small batches."""

import torch

from edgeprune.models.classifier import EncoderClassifier
from tests.conftest import tiny_bert

LAYERS, HEADS, HEAD_SIZE = 3, 4, 8


def classifier(encoder=None, seed: int = 0):
    encoder = encoder if encoder is not None else tiny_bert(seed)
    torch.manual_seed(3)
    return EncoderClassifier(encoder, torch.nn.Linear(32, 3)).eval()


def batches(count: int = 3, size: int = 4, length: int = 12, padded: bool = True, seed: int = 5):
    """`count` batches; with `padded`, every other example ends in padding of varying length."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(1000, 30522, (size, length), generator=generator)
        mask = torch.ones_like(ids)
        if padded:
            for row in range(0, size, 2):
                mask[row, length - 2 - row:] = 0
            ids = ids * mask
        labels = torch.randint(0, 3, (size,), generator=generator)
        out.append({"input_ids": ids, "attention_mask": mask, "labels": labels})
    return out


def silence_head(encoder, layer: int, head: int) -> None:
    """Zero the output-projection columns that read `head`, so it writes nothing to the residual stream."""
    with torch.no_grad():
        encoder.encoder.layer[layer].attention.output.dense.weight[:, head * HEAD_SIZE:(head + 1) * HEAD_SIZE] = 0
