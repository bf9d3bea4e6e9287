"""Causal-LM recovery on text with a tiny random Llama: document splits that never leak held-out text into
training, token blocks, perplexity, and prune → recover schedules that respect grouped-query attention."""

import copy
import math
import random

import numpy as np
import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.importance.base import HeadScores
from edgeprune.models import adapter_for
from edgeprune.models.llama import gqa_removal_is_valid
from edgeprune.progress import Progress
from edgeprune.pruning import Constraints, plan_global_topk
from edgeprune.pruning.ffn import intermediate_sizes
from edgeprune.recovery import DistillConfig, kl_to_teacher
from edgeprune.recovery.losses import task_loss
from edgeprune.recovery.schedules import plan_closest, prune_and_recover, prune_ffn_and_recover
from edgeprune.recovery.text import TextCorpus, perplexity, split_documents, token_blocks

QUIET = Progress(enabled=False)
VOCAB = 64
SEPARATOR = 2
WORDS = ["the", "market", "rose", "as", "shares", "fell", "game", "won", "team", "film", "music", "vote", "policy"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _llama(seed=0, layers=3):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(30)  # confident next-token distributions, so that pruning visibly moves them
    return model


def _texts(count=40, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 40))) for _ in range(count)]


def _encode(text):
    return [3 + ord(c) % (VOCAB - 3) for c in text]


def test_documents_split_disjointly_deterministically_and_by_seed():
    splits = split_documents(100, seed=1, validation=0.1, held_out=0.3)
    assert {k: len(v) for k, v in splits.items()} == {"held_out": 30, "validation": 10, "calibration": 60}
    assert sorted(i for v in splits.values() for i in v) == list(range(100))
    assert split_documents(100, seed=1, validation=0.1, held_out=0.3) == splits
    assert split_documents(100, seed=2, validation=0.1, held_out=0.3)["held_out"] != splits["held_out"]
    with pytest.raises(UserInputError, match="leave no calibration"):
        split_documents(100, 0, validation=0.5, held_out=0.5)
    with pytest.raises(UserInputError, match="held_out share must be between 0 and 1"):
        split_documents(100, 0, held_out=0)


def test_token_blocks_join_documents_with_the_separator_and_drop_the_tail():
    blocks = token_blocks([[5, 6, 7], [8], [9, 10, 11, 12]], 3, separator=SEPARATOR)
    assert blocks.tolist() == [[5, 6, 7], [SEPARATOR, 8, SEPARATOR], [9, 10, 11]]  # 12 and its separator left over
    assert token_blocks([[5, 6]], 3).shape == (0, 3)
    with pytest.raises(UserInputError, match="block_size must be at least 2"):
        token_blocks([[1, 2]], 1)


def test_training_and_validation_never_see_a_held_out_document():
    # document i is written in tokens 10 + i only, so every token tells which document it came from
    texts = [f"doc{i}" for i in range(30)]
    corpus = TextCorpus.from_texts(texts, lambda text: [10 + int(text[3:])] * 7, block_size=4, seed=3,
                                   separator=SEPARATOR)
    held_out = {10 + i for i in corpus.documents["held_out"]}
    assert held_out and not held_out & {10 + i for i in corpus.documents["calibration"]}
    data = corpus.distill_data(batch_size=3, seed=0)
    seen = set()
    for epoch in range(2):
        for batch in data.train(epoch):
            seen |= set(batch["input_ids"].flatten().tolist())
    for batch in data.validation():
        seen |= set(batch["input_ids"].flatten().tolist())
    assert not seen & held_out
    assert seen - {SEPARATOR} == {10 + i for i in corpus.documents["calibration"] + corpus.documents["validation"]}
    scored = {t for batch in corpus.batches("held_out", 2) for t in batch["input_ids"].flatten().tolist()}
    assert scored - {SEPARATOR} == held_out
    # every calibration block once per epoch, in a seeded order that changes between epochs
    epoch0 = torch.cat([b["input_ids"] for b in data.train(0)])
    assert sorted(map(tuple, epoch0.tolist())) == sorted(map(tuple, corpus.blocks["calibration"].tolist()))
    assert torch.equal(epoch0, torch.cat([b["input_ids"] for b in corpus.distill_data(3, seed=0).train(0)]))
    assert not torch.equal(epoch0, torch.cat([b["input_ids"] for b in data.train(1)]))


def test_a_split_too_short_for_one_block_is_a_clear_error():
    with pytest.raises(UserInputError, match="fewer than 500 tokens"):
        TextCorpus.from_texts(_texts(10), _encode, block_size=500)


def test_perplexity_is_exp_of_the_transformers_loss_and_task_loss_is_next_token_loss():
    model = _llama()
    ids = torch.randint(3, VOCAB, (3, 16), generator=torch.Generator().manual_seed(0))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss
        torch.testing.assert_close(task_loss(model, batch), loss)
    assert perplexity(model, [batch]) == pytest.approx(math.exp(float(loss)), rel=1e-5)


def test_plan_closest_lands_nearest_to_the_target_under_gqa():
    scores = HeadScores(np.random.default_rng(0).random((30, 9)), "random", 1)
    constraints = Constraints(kv_heads=(3,) * 30)
    assert plan_global_topk(scores, 68, constraints=constraints).heads_removed == 63  # snapping falls short
    plan = plan_closest(scores, 68, constraints)
    assert plan.heads_removed == 69  # reachable counts are multiples of 3: 69 is the nearest to 68
    assert plan_closest(scores, 67, constraints).heads_removed == 66  # one off, where 69 is two off
    for removed in plan.removed_heads.values():
        assert gqa_removal_is_valid(9, 3, removed) is None
    with pytest.raises(UserInputError, match="cannot remove 300 heads"):
        plan_closest(scores, 300, constraints)


@pytest.mark.parametrize("schedule", ["one-shot", "iterative"])
def test_decoder_prune_and_recover_respects_gqa_and_recovers_on_held_out_text(schedule):
    teacher = _llama()
    corpus = TextCorpus.from_texts(_texts(60), _encode, block_size=16, seed=0, separator=SEPARATOR)
    data = corpus.distill_data(batch_size=4, seed=0)
    config = DistillConfig(task_weight=0.0, temperature=1.0, learning_rate=1e-3, warmup_steps=1, max_steps=40,
                           eval_every=5, patience=0)
    outcome = prune_and_recover(copy.deepcopy(teacher), teacher, data, 6, schedule, steps=2, recover_config=config,
                                criterion="taylor", progress=QUIET)
    model = outcome.model
    blocks = adapter_for(model).attention_blocks(model)
    assert outcome.plan.heads_removed == 6 and sum(b.num_heads for b in blocks) == 12
    for block, dense in zip(blocks, range(3), strict=True):
        removed = [h for h in range(6) if h not in block.original_heads]
        assert gqa_removal_is_valid(6, 2, removed) is None, (dense, removed)
        assert block.num_heads % block.num_kv_heads == 0
    # the one-shot pruned model without recovery, from the same plan, is further from the teacher on held-out text
    from edgeprune.pruning import apply_plan

    pruned = apply_plan(copy.deepcopy(teacher), outcome.plan)
    held_out = list(corpus.batches("held_out", 4))
    assert all(d.metric == "neg_kl" for d in outcome.distillations)
    assert kl_to_teacher(model, teacher, held_out) < 0.5 * kl_to_teacher(pruned, teacher, held_out)


def test_decoder_layer_removal_with_hidden_alignment_keeps_gqa_valid():
    teacher = _llama(layers=4)
    corpus = TextCorpus.from_texts(_texts(60), _encode, block_size=16, seed=0, separator=SEPARATOR)
    config = DistillConfig(task_weight=0.0, hidden_weight=1.0, learning_rate=3e-3, warmup_steps=1, max_steps=4,
                           eval_every=2, patience=0)
    outcome = prune_and_recover(copy.deepcopy(teacher), teacher, corpus.distill_data(4), 4, remove_layers=1,
                                recover_config=config, criterion="taylor", progress=QUIET)
    assert len(outcome.layers.removed) == 1 and len(outcome.layers.layer_map) == 3
    assert outcome.distillations[0].config.layer_map == outcome.layers.layer_map
    blocks = adapter_for(outcome.model).attention_blocks(outcome.model)
    assert len(blocks) == 3 and sum(b.num_heads for b in blocks) == 14
    assert all(gqa_removal_is_valid(6, 2, [h for h in range(6) if h not in b.original_heads]) is None
               for b in blocks)


def test_decoder_ffn_removal_and_recovery():
    teacher = _llama()
    corpus = TextCorpus.from_texts(_texts(60), _encode, block_size=16, seed=0, separator=SEPARATOR)
    model = copy.deepcopy(teacher)
    # the gap FFN removal leaves is small, so a gentle learning rate: large first Adam steps would overshoot it
    config = DistillConfig(task_weight=0.0, learning_rate=1e-4, warmup_steps=1, max_steps=30, eval_every=5,
                           patience=0)
    removed, result = prune_ffn_and_recover(model, teacher, corpus.distill_data(4), 0.75, recover_config=config,
                                            progress=QUIET)
    assert intermediate_sizes(model) == [16, 16, 16] and all(len(v) == 48 for v in removed.values())
    assert model.config.intermediate_size == 16 and model.model.layers[0].mlp.intermediate_size == 16
    assert result.best_step > 0 and -result.best_metric < 0.6 * -result.initial_metric  # validation KL to the teacher


def test_wrappers_without_an_attention_mask_distill_and_score_like_the_bare_model():
    from edgeprune.models.classifier import CausalLMLogits
    from edgeprune.recovery import distill

    teacher = _llama()
    corpus = TextCorpus.from_texts(_texts(60), _encode, block_size=16, seed=0, separator=SEPARATOR)
    held_out = list(corpus.batches("held_out", 4))
    wrapped_teacher = CausalLMLogits(teacher).eval()
    assert perplexity(wrapped_teacher, held_out) == pytest.approx(perplexity(teacher, held_out), rel=1e-6)
    student = copy.deepcopy(teacher)
    from edgeprune import prune_heads

    prune_heads(student, {0: [0, 1, 2], 2: [1, 4]})
    wrapped_student = CausalLMLogits(student)
    before = kl_to_teacher(wrapped_student, wrapped_teacher, held_out)
    assert before == pytest.approx(kl_to_teacher(student, teacher, held_out), rel=1e-6)
    config = DistillConfig(task_weight=0.0, learning_rate=1e-3, warmup_steps=1, max_steps=20, eval_every=5, patience=0)
    result = distill(wrapped_student, wrapped_teacher, corpus.distill_data(4), config, QUIET)
    assert result.metric == "neg_kl" and result.best_step > 0
    assert kl_to_teacher(student, teacher, held_out) < 0.7 * before


def test_ffn_removal_folds_the_removed_neurons_means_as_fit_does_unless_told_not_to():
    """prune_ffn_and_recover removes neurons through apply_structure with fit's compensation: the student starts
    closer to the teacher (validation KL before any step) than the same removal without it."""
    teacher = _llama()
    corpus = TextCorpus.from_texts(_texts(60), _encode, block_size=16, seed=0, separator=SEPARATOR)
    config = DistillConfig(task_weight=0.0, learning_rate=1e-4, warmup_steps=1, max_steps=1, eval_every=1)
    starts = {}
    for compensate in (True, False):
        model = copy.deepcopy(teacher)
        removed, result = prune_ffn_and_recover(model, teacher, corpus.distill_data(4), 0.5, recover_config=config,
                                                progress=QUIET, compensate=compensate)
        assert intermediate_sizes(model) == [32, 32, 32]
        assert (model.model.layers[0].mlp.down_proj.bias is not None) == compensate
        starts[compensate] = -result.initial_metric  # validation KL to the teacher before training
    assert starts[True] < starts[False]
