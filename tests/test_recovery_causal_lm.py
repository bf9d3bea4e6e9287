"""Distillation losses for a causal LM: next-token loss and per-token KL on a tiny random Llama."""

import copy

import pytest
import torch

from edgeprune.progress import Progress
from edgeprune.recovery import DistillConfig, DistillData, distill, kl_to_teacher
from edgeprune.recovery.losses import Outputs, distillation_loss, next_token_loss

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _llama(seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(config).eval()


def _batches(count, seed):
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(0, 64, (4, 10), generator=generator)
        mask = torch.ones_like(ids)
        mask[0, 6:] = 0
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


def test_next_token_loss_matches_transformers_and_ignores_padding():
    model = _llama()
    batch = _batches(1, 0)[0]
    batch["attention_mask"][:] = 1
    with torch.no_grad():
        output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["input_ids"])
        ours = next_token_loss(output.logits, batch["input_ids"], batch["attention_mask"])
    torch.testing.assert_close(ours, output.loss)
    logits = output.logits.clone()
    mask = batch["attention_mask"].clone()
    mask[0, 6:] = 0
    changed = logits.clone()
    changed[0, 6:] += 100  # positions after the padding starts: their predictions must not count
    torch.testing.assert_close(next_token_loss(logits, batch["input_ids"], mask),
                               next_token_loss(changed, batch["input_ids"], mask))


def test_kd_term_is_zero_for_the_teacher_itself_and_positive_otherwise():
    teacher, other = _llama(0), _llama(1)
    batch = _batches(1, 0)[0]
    config = DistillConfig(task_weight=0.0, embedding_weight=0.0)
    with torch.no_grad():
        t = Outputs(teacher(**batch).logits, None, [])
        o = Outputs(other(**batch).logits, None, [])
    loss, parts = distillation_loss(t, t, batch, config)
    assert float(loss) == pytest.approx(0.0, abs=1e-6) and set(parts) == {"kd"}
    loss, parts = distillation_loss(o, t, batch, DistillConfig())
    assert set(parts) == {"task", "kd"} and parts["kd"] > 0.01  # no embedding from a causal LM


def test_distilling_a_perturbed_llama_lowers_its_kl_to_the_teacher():
    teacher = _llama()
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        student.lm_head.weight.add_(0.5 * torch.randn_like(student.lm_head.weight))
    data = DistillData.from_batches(_batches(4, 1), _batches(1, 2))
    held_out = _batches(2, 3)
    before = kl_to_teacher(student, teacher, held_out)
    result = distill(student, teacher, data, DistillConfig(task_weight=0.0, learning_rate=3e-3, warmup_steps=1,
                                                           max_steps=20, eval_every=5, patience=0),
                     Progress(enabled=False))
    assert result.metric == "neg_kl" and result.best_step > 0
    assert kl_to_teacher(student, teacher, held_out) < 0.7 * before
