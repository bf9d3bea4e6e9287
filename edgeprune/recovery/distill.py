"""`distill`: train a pruned student to match its dense teacher, with early stopping on validation data."""

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack

import torch
from torch import nn

from edgeprune.importance.base import Batch
from edgeprune.models import adapter_for
from edgeprune.models.base import frozen_parameters
from edgeprune.progress import Progress
from edgeprune.quantize.recipes import CALIBRATION_EXAMPLES
from edgeprune.recovery.config import DistillConfig, DistillResult
from edgeprune.recovery.data import DistillData
from edgeprune.recovery.losses import (
    Outputs,
    captured_hidden,
    distillation_loss,
    forward,
    is_causal_lm,
    kl_divergence,
    mask_of,
)
from edgeprune.recovery.precision import resolve_precision, training_autocast
from edgeprune.recovery.teacher_outputs import TeacherOutputs
from edgeprune.recovery.weight_grid import grid_of, trained_on_grid, trains_output_layer


def resolve_layer_map(student: nn.Module, teacher: nn.Module, config: DistillConfig) -> list[int] | None:
    """The student → teacher layer map hidden-state alignment uses (None when that term is off)."""
    if config.hidden_weight == 0:
        return None
    student_layers = len(adapter_for(student).layer_modules(student))
    teacher_layers = len(adapter_for(teacher).layer_modules(teacher))
    layer_map = config.layer_map
    if layer_map is None:
        if student_layers != teacher_layers:
            raise ValueError(f"the student has {student_layers} layers and the teacher {teacher_layers}; "
                             "hidden-state alignment needs a layer_map")
        return list(range(student_layers))
    if len(layer_map) != student_layers or any(not 0 <= j < teacher_layers for j in layer_map):
        raise ValueError(f"layer_map {layer_map} must give one teacher layer (0..{teacher_layers - 1}) "
                         f"for each of the student's {student_layers} layers")
    return list(layer_map)


@torch.no_grad()
def evaluate(student: nn.Module, teacher: nn.Module, batches: Iterable[Batch], temperature: float = 1.0,
             teacher_forward: Callable[[Batch], Outputs] | None = None) -> dict[str, float]:
    """Validation numbers: KL to the teacher (at `temperature`, T²-scaled) and, with labels, accuracy. The
    teacher's outputs come from `teacher_forward` when given (`TeacherOutputs.outputs`: kept ones)."""
    kl_sum = examples = correct = labelled = 0.0
    for batch in batches:
        s = forward(student, batch)
        t = forward(teacher, batch) if teacher_forward is None else teacher_forward(batch)
        causal = is_causal_lm(s.logits)
        size = len(batch["input_ids"])
        kl_sum += float(kl_divergence(s.logits, t.logits, temperature, mask_of(batch) if causal else None)) * size
        examples += size
        if "labels" in batch and not causal:
            correct += float((s.logits.argmax(-1) == batch["labels"]).sum())
            labelled += size
    if examples == 0:
        raise ValueError("the validation batches were empty")
    numbers = {"kl": kl_sum / examples}
    if labelled:
        numbers["accuracy"] = correct / labelled
    return numbers


def kl_to_teacher(student: nn.Module, teacher: nn.Module, batches: Iterable[Batch], temperature: float = 1.0) -> float:
    """Mean KL(teacher ‖ student) of the output distributions over `batches`."""
    with _eval(student), _eval(teacher):
        return evaluate(student, teacher, batches, temperature)["kl"]


class _eval:
    def __init__(self, model: nn.Module) -> None:
        self.model, self.was = model, model.training

    def __enter__(self) -> None:
        self.model.eval()

    def __exit__(self, *_: object) -> None:
        self.model.train(self.was)


def _score(numbers: dict[str, float]) -> tuple[float, float]:
    """Ordering of validation results: accuracy first when there is one, lower KL breaking ties."""
    return (numbers.get("accuracy", -numbers["kl"]), -numbers["kl"])


def _lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up over `warmup` steps, then linear decay to zero at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def distill(student: nn.Module, teacher: nn.Module, data: DistillData, config: DistillConfig | None = None,
            progress: Progress | None = None, teacher_outputs: TeacherOutputs | None = None) -> DistillResult:
    """Train `student` in place towards `teacher` (frozen) and keep its best validation weights.

    Only the student's trainable parameters change. The metric is validation accuracy when batches carry
    labels for a classifier, else minus the KL to the teacher. Stops at `max_steps`, `max_seconds`,
    `max_epochs` or after `patience` validation passes without improvement, whichever comes first; the
    weights of the best validation pass (the starting weights count as pass 0) are restored.

    The teacher's outputs on a batch are computed once and reused (`TeacherOutputs`): pass one `teacher_outputs`
    to several runs with the same teacher and data (fit's recoveries) and only the first computes them.
    """
    if student is teacher:
        raise ValueError("the student and the teacher are the same module; distill a copy (copy.deepcopy)")
    config = config or DistillConfig()
    progress = progress or Progress()
    layer_map = resolve_layer_map(student, teacher, config)
    params = [p for p in student.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the student has no trainable parameters")
    teacher_params = {id(p) for p in teacher.parameters()}
    if any(id(p) in teacher_params for p in params):
        raise ValueError("the student shares parameters with the teacher; distill a copy (copy.deepcopy)")
    if teacher_outputs is None:
        teacher_outputs = TeacherOutputs(teacher)
    elif teacher_outputs.teacher is not teacher:
        raise ValueError("teacher_outputs holds the outputs of another teacher")
    device = params[0].device
    precision = resolve_precision(config.precision, device)
    started = time.monotonic()
    was_training, teacher_was_training = student.training, teacher.training
    student_hidden: list[torch.Tensor] = []
    teacher_hidden: list[torch.Tensor] = []
    with ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))  # dropout draws from the seeded global RNG
        stack.enter_context(frozen_parameters(teacher))
        if config.quantization_aware:  # validated from here on, trained, and left on the recipe's 4-bit grid
            calibration = output_calibration(student, data) if trains_output_layer(config.quantization_aware) else None
            on_grid = stack.enter_context(trained_on_grid(student, grid_of(config.quantization_aware), calibration))
            progress.note(f"  training {on_grid} linears through {config.quantization_aware}'s 4-bit grid"
                          + (" (the output layer placed by GPTQ first)" if calibration else ""))
        if layer_map is not None:
            stack.enter_context(captured_hidden(student, student_hidden))
            stack.enter_context(captured_hidden(teacher, teacher_hidden))
        torch.manual_seed(config.seed)
        teacher.eval()
        student.eval()

        def compute_teacher(batch: Batch) -> Outputs:
            outputs = forward(teacher, batch)
            outputs.hidden = list(teacher_hidden)
            teacher_hidden.clear()
            return outputs

        def teacher_forward(batch: Batch) -> Outputs:
            # outputs kept with hidden states are kept apart from those kept without
            return teacher_outputs.outputs(batch, compute_teacher, "hidden" if layer_map is not None else "")

        initial = evaluate(student, teacher, data.validation(), teacher_forward=teacher_forward)
        metric = "accuracy" if "accuracy" in initial else "neg_kl"
        best, best_step = initial, 0
        best_state = {k: v.detach().clone() for k, v in student.state_dict().items()}
        history = [{"step": 0, **initial}]  # no training loss yet
        optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        warmup = min(config.warmup_steps, config.max_steps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: _lr_factor(step, warmup, config.max_steps))
        step = epoch = stale = 0
        stopped = ""
        losses: list[float] = []
        evaluated_at = 0

        def validate() -> None:
            nonlocal best, best_step, best_state, stale, evaluated_at
            student.eval()
            numbers = evaluate(student, teacher, data.validation(), teacher_forward=teacher_forward)
            student.train(config.dropout)
            evaluated_at = step
            history.append({"step": step, "loss": sum(losses) / max(1, len(losses)), **numbers})
            losses.clear()
            if _score(numbers) > _score(best):
                best, best_step, stale = numbers, step, 0
                best_state = {k: v.detach().clone() for k, v in student.state_dict().items()}
            else:
                stale += 1
            progress.note(f"  step {step}: validation {_describe(numbers)} "
                          f"(best {_describe(best)} at step {best_step})")

        student.train(config.dropout)
        with progress.task("distilling the student from the teacher", config.max_steps) as bar:
            while not stopped:
                seen = 0
                for batch in data.train(epoch):
                    seen += 1
                    teacher_out = teacher_forward(batch)
                    with training_autocast(precision, device):
                        student_out = forward(student, batch)
                    student_out = as_float32(student_out, student_hidden)
                    loss, _parts = distillation_loss(student_out, teacher_out, batch, config, layer_map)
                    loss_value = float(loss.detach())
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    del student_out, teacher_out, loss
                    student_hidden.clear()
                    teacher_hidden.clear()
                    step += 1
                    losses.append(loss_value)
                    bar.label = f"distilling (loss {losses[-1]:.4f}, best {_describe(best)})"
                    bar.advance(1)
                    if step % config.eval_every == 0:
                        validate()
                        if config.patience and stale >= config.patience:
                            stopped = "early_stop"
                            break
                    if step >= config.max_steps:
                        stopped = "max_steps"
                        break
                    if config.max_seconds is not None and time.monotonic() - started >= config.max_seconds:
                        stopped = "max_seconds"
                        break
                if seen == 0:
                    raise ValueError(f"epoch {epoch} had no training batches")
                if not stopped:
                    epoch += 1
                    if config.max_epochs is not None and epoch >= config.max_epochs:
                        stopped = "max_epochs"
        if evaluated_at != step:
            validate()
        student.load_state_dict(best_state)
        del optimizer, best_state
    student.train(was_training)
    teacher.train(teacher_was_training)
    return DistillResult(metric, _metric_value(initial, metric), _metric_value(best, metric), best_step, step,
                         epoch + (1 if stopped != "max_epochs" else 0), time.monotonic() - started, stopped,
                         history, config, precision)


def output_calibration(student: nn.Module, data: DistillData) -> Callable[[], None]:
    """Runs `student` on the first training batches, CALIBRATION_EXAMPLES examples or a few more (as many as an
    export's calibration reads): what GPTQ places its output layer on before a quantization-aware recovery trains
    it (`weight_grid.place_output_layer`)."""

    def run() -> None:
        examples = 0
        for batch in data.train(0):
            forward(student, batch)
            examples += len(batch["input_ids"])
            if examples >= CALIBRATION_EXAMPLES:
                return

    return run


def as_float32(outputs: Outputs, hidden: Sequence[torch.Tensor]) -> Outputs:
    """A student's outputs (and its captured hidden states) in float32, for the losses: under bfloat16 autocast
    the last linear's output is bfloat16."""
    return Outputs(outputs.logits.float(), None if outputs.embedding is None else outputs.embedding.float(),
                   [h.float() for h in hidden])


def _metric_value(numbers: dict[str, float], metric: str) -> float:
    return numbers["accuracy"] if metric == "accuracy" else -numbers["kl"]


def _describe(numbers: dict[str, float]) -> str:
    text = f"kl {numbers['kl']:.4f}"
    return f"accuracy {numbers['accuracy']:.4f}, {text}" if "accuracy" in numbers else text


def teacher_layer_map(kept_layers: Sequence[int]) -> list[int]:
    """After removing layers, student layer i is the teacher's layer kept_layers[i]."""
    return list(kept_layers)
