"""Quality on the test split that the benchmarks share: accuracy, and embedding cosine to the dense model."""

import torch


@torch.no_grad()
def dense_test_embeddings(teacher, task, limit=None) -> torch.Tensor:
    return torch.cat([teacher(b["input_ids"], b["attention_mask"])[1] for b in task.batches("test", 32, limit=limit)])


@torch.no_grad()
def evaluate(model, task, dense_embeddings, limit=None) -> tuple[float, float]:
    """(test accuracy, mean cosine of the pooled embedding to the dense model's) on the first `limit` docs."""
    model.eval()
    correct, cosines, offset = 0, [], 0
    for batch in task.batches("test", 32, limit=limit):
        logits, embedding = model(batch["input_ids"], batch["attention_mask"])
        correct += int((logits.argmax(-1) == batch["labels"]).sum())
        reference = dense_embeddings[offset:offset + len(embedding)]
        cosines.append(torch.nn.functional.cosine_similarity(embedding, reference, dim=-1))
        offset += len(embedding)
    return correct / offset, float(torch.cat(cosines).mean())
