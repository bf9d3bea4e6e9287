"""Hugging Face `datasets`: a `Dataset` (or one split of a `DatasetDict`) handed over in Python, or a folder written
by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`, told by its `state.json` and `dataset_info.json` (a
`DatasetDict`'s by its `dataset_dict.json`; `--data folder/train` names one of its splits).

Columns are named as for CSV and JSONL (`text_column`, `label_column`). The text column may hold strings, or images
(an `Image` column: the data is then image data; with the default text column, a data set whose only image column
is not called "text" uses that one). A `ClassLabel` column gives its class names as labels; plain labels are
strings or numbers. The `datasets` package is imported only when a saved folder is read, so edgeprune works without
it; a folder needs it installed, and its absence is one line naming the package.
"""

import hashlib
import sys
from pathlib import Path
from typing import Any

from edgeprune.data.base import DataFormat, Examples, LabeledImage, LabeledText, label_string, missing_column
from edgeprune.errors import UserInputError
from edgeprune.extras import require_extra

NAME = "hf-dataset"
DATASET_FILES = ("state.json", "dataset_info.json")  # what Dataset.save_to_disk writes beside its .arrow shards
DATASET_DICT_FILE = "dataset_dict.json"  # what DatasetDict.save_to_disk writes beside one folder per split
STRING_TYPES = ("string", "large_string")
DIGEST_CHARS = 16


def is_saved_dataset(path: Path) -> bool:
    """A folder written by `Dataset.save_to_disk` or `DatasetDict.save_to_disk`."""
    return path.is_dir() and (all((path / name).is_file() for name in DATASET_FILES)
                              or (path / DATASET_DICT_FILE).is_file())


def is_dataset(value: object) -> bool:
    """A `datasets` object (Dataset, DatasetDict or their streaming kinds); never imports `datasets` to tell."""
    module = sys.modules.get("datasets")  # a value cannot be a Dataset unless the package is already imported
    if module is None:
        return False
    kinds = tuple(getattr(module, name) for name in ("Dataset", "DatasetDict", "IterableDataset",
                                                      "IterableDatasetDict") if hasattr(module, name))
    return isinstance(value, kinds)


def import_datasets() -> Any:
    require_extra("datasets", "reading a saved Hugging Face dataset")
    import datasets

    return datasets


def describe_dataset(value: object) -> str:
    """A one-line name for an in-memory data set, for messages and the record (its repr spans lines)."""
    kind = type(value).__name__
    if kind in ("DatasetDict", "IterableDatasetDict"):
        return f"the datasets.{kind} with splits {', '.join(repr(name) for name in value)}"
    rows = getattr(value, "num_rows", None)
    return f"the datasets.{kind}" + (f" of {rows} rows" if rows is not None else "")


def choose_split(data: Any, dataset_split: str | None, where: str, folder: Path | None = None) -> tuple[Any, str]:
    """The `Dataset` to read and the name to give it: a `DatasetDict`'s named split, or its only one."""
    kind = type(data).__name__
    if kind in ("IterableDataset", "IterableDatasetDict"):
        raise UserInputError(f"{where} is a streaming datasets.{kind}; edgeprune splits and reads every example, so "
                             "load it without streaming=True (or call .take(n) and pass Dataset.from_list(list(...)))")
    if kind != "DatasetDict":
        if dataset_split is not None:
            raise UserInputError(f"dataset_split {dataset_split!r} was given, but {where} is a single Dataset, not "
                                 "a DatasetDict with splits; leave dataset_split out")
        return data, where
    names = list(data)
    if not names:
        raise UserInputError(f"{where} holds no splits; it needs at least one Dataset")
    pick = f"--data {folder / names[0]}" if folder is not None else f"dataset_split={names[0]!r}"
    if dataset_split is None:
        if len(names) != 1:
            raise UserInputError(f"{where} holds the splits {', '.join(repr(n) for n in names)}; choose one, e.g. "
                                 f"{pick} (edgeprune makes its own calibration, validation and test split from it)")
        dataset_split = names[0]
    if dataset_split not in names:
        raise UserInputError(f"{where} has no split {dataset_split!r}; its splits are: "
                             f"{', '.join(repr(n) for n in names)}")
    return data[dataset_split], f"split {dataset_split!r} of {where}"


def input_column(dataset: Any, text_column: str, where: str) -> str:
    """The column holding the inputs: `text_column`, or with the default name the data set's only Image column."""
    if text_column in dataset.column_names:
        return text_column
    images = [name for name, feature in dataset.features.items() if type(feature).__name__ == "Image"]
    if text_column == "text" and len(images) == 1:
        return images[0]
    raise missing_column(where, "", text_column, "text", list(dataset.column_names))


def label_reader(dataset: Any, label_column: str, where: str) -> Any:
    """A function from a label cell to its text (None when there is none): class names for a ClassLabel column."""
    if label_column not in dataset.column_names:
        raise missing_column(where, "", label_column, "label", list(dataset.column_names))
    feature = dataset.features[label_column]
    if type(feature).__name__ == "ClassLabel":
        def class_name(value: object) -> str | None:
            return None if value is None or value == -1 else feature.int2str(int(value))  # -1: no label
        return class_name
    if type(feature).__name__ != "Value":
        raise UserInputError(f"{where}: label column {label_column!r} holds {feature}; a label is a string, "
                             "a number or a ClassLabel")
    return label_string


def read_labels(dataset: Any, label_column: str | None, where: str) -> list[str]:
    if label_column is None:
        return [""] * dataset.num_rows
    to_text = label_reader(dataset, label_column, where)
    labels = []
    for row, value in enumerate(dataset[label_column]):
        label = to_text(value)
        if label is None:
            raise UserInputError(f"{where} row {row}: no label in {label_column!r}; give every row a label, "
                                 "or remove the rows without one (dataset.filter)")
        labels.append(label)
    return labels


def read_texts(dataset: Any, column: str, labels: list[str], where: str, name: str) -> tuple[list[LabeledText], int]:
    feature = dataset.features[column]
    if type(feature).__name__ != "Value" or feature.dtype not in STRING_TYPES:
        raise UserInputError(f"{where}: column {column!r} holds {feature}, not text or images; name the "
                             "column that holds the text (or an Image column) with --text-column")
    documents, skipped = [], 0
    for row, (text, label) in enumerate(zip(dataset[column], labels, strict=True)):
        if not (text or "").strip():
            skipped += 1
            continue
        documents.append(LabeledText(text.strip(), label, f"{name}[{row}]"))
    if not documents:
        raise UserInputError(f"{where}: column {column!r} is empty in all {dataset.num_rows} rows; name the "
                             "column that holds the text with --text-column")
    return documents, skipped


def read_images(dataset: Any, column: str, labels: list[str], where: str, name: str) -> list[LabeledImage]:
    """Every image decoded once here, so a broken one is reported before any work starts (as for image folders)."""
    from edgeprune.data.images import DECODE_ERRORS, decode_failure, decode_image

    datasets = import_datasets()
    cells = dataset.cast_column(column, datasets.Image(decode=False))[column]  # {"bytes": ..., "path": ...}
    items, broken = [], []
    for row, (cell, label) in enumerate(zip(cells, labels, strict=True)):
        encoded, path = (cell or {}).get("bytes"), (cell or {}).get("path")
        if encoded is None and not path:
            broken.append(f"row {row} (no image)")
            continue
        try:  # an Image column holds the encoded file, or (built from file names) the path of one
            content = encoded if encoded is not None else Path(path).read_bytes()
            decode_image(content)
        except DECODE_ERRORS as error:
            broken.append(f"row {row} ({decode_failure(error)})")
            continue
        digest = hashlib.sha256(content).hexdigest()[:DIGEST_CHARS]  # the split follows content, not row order
        items.append(LabeledImage("" if encoded is not None else str(path), label, f"{name}[{row}]",
                                  encoded=encoded, digest=digest))
    if broken:
        shown = "; ".join(broken[:5]) + (f"; and {len(broken) - 5} more" if len(broken) > 5 else "")
        raise UserInputError(f"{len(broken)} of {dataset.num_rows} images of {where} do not decode: {shown}; "
                             "replace them with valid images or remove them (dataset.filter)")
    return items


def examples_from_dataset(data: Any, text_column: str = "text", label_column: str | None = "label", *,
                          dataset_split: str | None = None, where: str | None = None,
                          folder: Path | None = None) -> Examples:
    """The examples of a `datasets.Dataset`, or of one split of a `DatasetDict` (`dataset_split`, needed when it
    holds more than one). `where` names the data in messages; `folder` is where it was read from, if anywhere."""
    where = where or describe_dataset(data)
    dataset, where = choose_split(data, dataset_split, where, folder)
    if dataset.num_rows == 0:
        raise UserInputError(f"{where} has no rows; it needs one row per example")
    name = folder.name if folder is not None else (dataset_split or "dataset")
    column = input_column(dataset, text_column, where)
    labels = read_labels(dataset, label_column, where)
    if type(dataset.features[column]).__name__ == "Image":
        images = read_images(dataset, column, labels, where, name)
        return Examples(images, "image", label_column is not None, where, NAME)
    documents, skipped = read_texts(dataset, column, labels, where, name)
    return Examples(documents, "text", label_column is not None, where, NAME, skipped)


def load_saved_dataset(path: Path, text_column: str = "text", label_column: str | None = "label", *,
                       dataset_split: str | None = None) -> Examples:
    """The `hf-dataset` format: a folder written by `save_to_disk`, read with `datasets.load_from_disk`."""
    if not is_saved_dataset(path):
        raise UserInputError(f"{path} is not a folder written by Dataset.save_to_disk (no {' and '.join(DATASET_FILES)}"
                             f", nor {DATASET_DICT_FILE})")
    datasets = import_datasets()
    try:
        data = datasets.load_from_disk(str(path))
    except (OSError, ValueError, KeyError, TypeError) as error:  # damaged state.json or shards, missing files
        message = " ".join(str(error).split())[:300]
        raise UserInputError(f"cannot read the saved dataset {path}: {message}") from None
    return examples_from_dataset(data, text_column, label_column, dataset_split=dataset_split, where=f"dataset {path}",
                                 folder=path)


FORMAT = DataFormat(NAME, "text or image", folder=True, suffixes=(".arrow",), load=load_saved_dataset,
                    detect=is_saved_dataset)
