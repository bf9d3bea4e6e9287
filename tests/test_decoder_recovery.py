"""fit recovers a pruned decoder the way its task says decoders recover (`Task.recovery_*`): batches of 2 blocks, KL
at temperature 1 without the next-token loss, learning rate 2e-4, validation passes over 16 blocks; an encoder's
task keeps DistillConfig's defaults, and `FitOptions.recovery_batch_size` still overrides the task."""

import copy

import pytest
import torch

from edgeprune.progress import Progress
from edgeprune.pruning import prune_heads
from edgeprune.recovery import DistillConfig
from edgeprune.search.options import FitOptions
from edgeprune.search.recovering import recovery_config, run_recovery
from edgeprune.tasks import make_task
from tests._byo import tiny_llama_dir, topic_rows, write_jsonl


def decoder_task(folder):  # noqa: ANN001, ANN201 - a Path; a CausalLMTask
    rows = topic_rows()
    data = write_jsonl(folder / "text.jsonl", [{"text": " ".join(r["text"] for r in rows[i:i + 2])}
                                               for i in range(0, 48, 1)] * 2)
    return make_task("causal-lm", tiny_llama_dir(folder / "llama", heads=4, kv_heads=2), data, max_length=8,
                     progress=Progress(enabled=False))


def blocks_seen(task, options: FitOptions) -> tuple[list[int], list[int], DistillConfig]:  # noqa: ANN001
    """The blocks of each training forward and of each no-grad forward (validation) of the student in one fit
    recovery, and the settings it ran with."""
    teacher = task.teacher().model
    student = copy.deepcopy(teacher)
    prune_heads(student, {0: [0, 1]})
    training, validation = [], []
    student.register_forward_hook(lambda _m, args, kwargs, _out: (training if torch.is_grad_enabled() else validation)
                                  .append(len(kwargs.get("input_ids", args[0] if args else None))), with_kwargs=True)
    result, _ = run_recovery(student, teacher, task, options, Progress(enabled=False))
    return training, validation, result.config


def test_a_decoder_recovers_with_its_tasks_settings(tmp_path):
    task = decoder_task(tmp_path)
    assert task.count("validation") > 16  # so that the 16-block validation limit shows
    training, validation, config = blocks_seen(task, FitOptions(recover_steps=6))
    assert training == [2] * 6
    # three validation passes (every 2 steps) plus the one before any step, 16 blocks each; then fit's own
    # validation estimate over the whole split
    passes = validation[:4 * 8]
    assert passes == [2] * 32
    assert sum(validation[32:]) == task.count("validation")
    assert (config.learning_rate, config.temperature, config.task_weight) == (2e-4, 1.0, 0.0)
    training, _, _ = blocks_seen(task, FitOptions(recover_steps=2, recovery_batch_size=3))
    assert training == [3, 3]


def test_an_encoder_keeps_the_default_distillation():
    from edgeprune.tasks.text_classification import TextClassificationTask as ClassificationTask

    config, defaults = recovery_config(ClassificationTask, FitOptions(recover_steps=30)), DistillConfig()
    assert (config.learning_rate, config.temperature, config.task_weight) == \
        (defaults.learning_rate, defaults.temperature, defaults.task_weight)
    assert ClassificationTask.recovery_batch_size == 16 and ClassificationTask.recovery_validation_limit is None


def test_fit_recovers_on_a_recipes_4_bit_grid_when_asked(tmp_path):
    from edgeprune.errors import UserInputError
    from edgeprune.quantize.block_offsets import BlockOffsetLinear, grid_linears

    task = decoder_task(tmp_path)
    teacher = task.teacher().model
    student = copy.deepcopy(teacher)
    prune_heads(student, {0: [0, 1]})
    options = FitOptions(recover_steps=2, recovery_quantization_aware="litert-int4")
    result, _ = run_recovery(student, teacher, task, options, Progress(enabled=False))
    assert result.config.quantization_aware == "litert-int4" == recovery_config(task, options).quantization_aware
    linears = grid_linears(student, 32)
    assert len(linears) == 2 * 6 + 1  # every 32-wide linear but layer 0's 16-wide o_proj; not the output layer
    assert all(torch.allclose(BlockOffsetLinear(m, 32).dense_weight(), m.weight, atol=1e-6) for m in linears)
    with pytest.raises(UserInputError, match="trains on an asymmetric 4-bit grid .*; int4 stores"):
        FitOptions(recovery_quantization_aware="int4")
