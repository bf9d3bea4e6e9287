"""fit recovers a pruned decoder the way its task says decoders recover (`Task.recovery_*`): batches of 2 blocks, KL
at temperature 1 without the next-token loss, learning rate 3e-4, validation passes over 16 blocks; an encoder's
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
from edgeprune.tasks.base import example_count
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
    assert example_count(task, "validation") > 16  # so that the 16-block validation limit shows
    training, validation, config = blocks_seen(task, FitOptions(recover_steps=6))
    assert training == [2] * 6
    # three validation passes (every 2 steps) plus the one before any step, 16 blocks each; then fit's own
    # validation estimate over the whole split
    passes = validation[:4 * 8]
    assert passes == [2] * 32
    assert sum(validation[32:]) == example_count(task, "validation")
    assert (config.learning_rate, config.temperature, config.task_weight) == (3e-4, 1.0, 0.0)
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


def test_fit_recovers_on_the_grid_by_default_only_when_the_teachers_weights_lie_on_it(tmp_path):
    """`recovery_quantization_aware="auto"` (fit's default): a teacher that came as a Q4_1 GGUF (its linears on
    asymmetric 4-bit blocks of 32, as SmolLM2's are) recovers on the ladder's grid recipe that puts the output layer at
    4 bits too, its output layer trained on that grid as well; a float teacher, or a ladder without such a recipe,
    recovers in float; a choice made by name is left as it is."""
    from edgeprune.quantize.block_offsets import BlockOffsetLinear, grid_linears, quantized_blocks
    from edgeprune.quantize.formats import output_layer
    from edgeprune.quantize.recipes import fit_ladder
    from edgeprune.recovery.weight_grid import grid_for_recovery, lies_on_grid, output_grid
    from edgeprune.search.recovering import settle_quantization_aware

    task = decoder_task(tmp_path)
    teacher = copy.deepcopy(task.teacher().model)
    litert, executorch = fit_ladder(("litert",)), fit_ladder(("executorch",))
    assert not lies_on_grid(teacher, 32) and grid_for_recovery(teacher, litert) is None
    with torch.no_grad():
        for linear in grid_linears(teacher, 32):
            linear.weight.copy_(quantized_blocks(linear.weight, 32))
    assert lies_on_grid(teacher, 32)
    assert grid_for_recovery(teacher, litert) == "litert-int4-all"
    assert grid_for_recovery(teacher, executorch) == "int4-decoder-all"
    assert grid_for_recovery(teacher, ("litert-int8", "litert-int4")) == "litert-int4"  # no 4-bit output layer
    assert grid_for_recovery(teacher, ("int8", "fp32")) is None
    assert grid_for_recovery(teacher, fit_ladder(("litert",), output_layer=False)) is None  # an encoder's ladder
    with torch.no_grad():  # about a tenth of a step off in every weight: not on the grid (a shift of a block is)
        for linear in grid_linears(teacher, 32):
            blocks = linear.weight.unflatten(1, (-1, 32))
            steps = ((blocks.amax(-1) - blocks.amin(-1)) / 15).repeat_interleave(32, 1)
            linear.weight.add_(steps * 0.1 * torch.randn_like(linear.weight) + steps)
    assert not lies_on_grid(teacher, 32)

    notes = []
    progress = Progress(enabled=False)
    progress.note = notes.append
    assert FitOptions().recovery_quantization_aware == "auto"
    grid_teacher = copy.deepcopy(task.teacher().model)
    with torch.no_grad():
        for linear in grid_linears(grid_teacher, 32):
            linear.weight.copy_(quantized_blocks(linear.weight, 32))
    settled = settle_quantization_aware(FitOptions(recover_steps=2), grid_teacher, litert, progress)
    assert settled.recovery_quantization_aware == "litert-int4-all"
    assert "lie on litert-int4-all's 4-bit grid" in notes[0]
    student = copy.deepcopy(grid_teacher)
    prune_heads(student, {0: [0, 1]})
    head = output_layer(student)
    assert not torch.equal(output_grid(head.weight, 32), head.weight)
    recovery_notes = []
    watched = Progress(enabled=False)
    watched.note = recovery_notes.append
    result, _ = run_recovery(student, grid_teacher, task, settled, watched)
    assert result.config.quantization_aware == "litert-int4-all"
    assert "  training 14 linears through litert-int4-all's 4-bit grid (the output layer placed by GPTQ first)" \
        in recovery_notes
    assert all(torch.allclose(BlockOffsetLinear(m, 32).dense_weight(), m.weight, atol=1e-6)
               for m in grid_linears(student, 32))
    assert output_layer(student) is head and torch.equal(output_grid(head.weight, 32), head.weight)
    float_teacher = task.teacher().model
    assert settle_quantization_aware(FitOptions(), float_teacher, litert, progress).recovery_quantization_aware is None
    explicit = FitOptions(recovery_quantization_aware="int4-decoder")
    assert settle_quantization_aware(explicit, float_teacher, litert, progress) is explicit
    no_recovery = settle_quantization_aware(FitOptions(recover_steps=0), grid_teacher, litert, progress)
    assert no_recovery.recovery_quantization_aware is None
    assert len(notes) == 1
    # unsettled (outside fit), "auto" recovers in float
    assert recovery_config(task, FitOptions()).quantization_aware is None
