"""The data formats, in a registry, and `load_examples`: the one entry point for user data."""

from pathlib import Path
from typing import Any

from edgeprune.data import csv_file, hf_dataset, image_folder, jsonl_file, text_folder
from edgeprune.data.base import DataFormat, Examples, no_usable_files, require_exists, scan_label_folders
from edgeprune.errors import UserInputError
from edgeprune.registry import Registry

FORMATS: Registry[DataFormat] = Registry("data format")
for _format in (csv_file.FORMAT, jsonl_file.FORMAT, text_folder.FORMAT, image_folder.FORMAT, hf_dataset.FORMAT):
    FORMATS.register(_format.name)(_format)


def detect_format(path: Path) -> str:
    """A file's format from its suffix; a folder's from its own layout (a saved Hugging Face dataset), else from the
    files in its sub-folders (text files or images)."""
    path = Path(path)
    require_exists(path)
    formats = [FORMATS.get(name) for name in FORMATS]
    if path.is_dir():
        for data_format in formats:
            if data_format.detect is not None and data_format.detect(path):
                return data_format.name
        found = scan_label_folders(path)  # refuses a folder that mixes text files and images
        suffixes = {file.suffix.lower() for _, file in found.text + found.image}
        for data_format in formats:
            if data_format.folder and suffixes & set(data_format.suffixes):
                return data_format.name
        raise no_usable_files(path, "one sub-folder per label holding .txt files (text-folder) or images "
                                    "(image-folder), e.g. data/positive/001.txt, or a folder written by "
                                    "Dataset.save_to_disk (hf-dataset)")
    suffix = path.suffix.lower()
    for data_format in formats:
        if not data_format.folder and suffix in data_format.suffixes:
            return data_format.name
    known = sorted(s for f in formats if not f.folder for s in f.suffixes)
    raise UserInputError(f"cannot tell the format of {path} from its suffix {suffix or '(none)'!r}; name it "
                         f"{', '.join(known)}, or give the format (one of: {', '.join(FORMATS.names())})")


def load_examples(path: "str | Path | Any", *, format: str | None = None, text_column: str = "text",
                  label_column: str | None = "label", dataset_split: str | None = None) -> Examples:
    """Load a user's data: a CSV/TSV or JSONL file, a folder of `<label>/*.txt` files or `<class>/<image>` files, a
    folder written by `Dataset.save_to_disk`, or an in-memory `datasets.Dataset` / `DatasetDict`.

    `format` is detected from the path when not given. With `label_column=None` the data is unlabelled (every label
    is ""), which is what the embedding and causal-LM tasks need; folders then ignore their sub-folder names.
    `dataset_split` picks the split of a `DatasetDict` (in memory or saved) that holds more than one.
    """
    if label_column is not None and label_column == text_column:
        raise UserInputError(f"the text and label columns are both {text_column!r}; name two different columns")
    if hf_dataset.is_dataset(path):
        if format not in (None, hf_dataset.NAME):
            raise UserInputError(f"{hf_dataset.describe_dataset(path)} is read as format {hf_dataset.NAME}, "
                                 f"not {format}; leave the format out")
        return hf_dataset.examples_from_dataset(path, text_column, label_column, dataset_split=dataset_split)
    if not isinstance(path, str | Path):
        raise UserInputError(f"data must be a file or folder path, or a datasets.Dataset; got a "
                             f"{type(path).__name__}")
    path = Path(path)
    require_exists(path)
    data_format = FORMATS.get(format) if format is not None else FORMATS.get(detect_format(path))
    if data_format.folder != path.is_dir():
        wanted, got = ("folder", "file") if data_format.folder else ("file", "folder")
        raise UserInputError(f"the {data_format.name} format reads a {wanted}, but {path} is a {got}")
    if dataset_split is not None:
        if data_format.name != hf_dataset.NAME:
            raise UserInputError(f"dataset_split {dataset_split!r} applies to Hugging Face datasets, but {path} is "
                                 f"{data_format.name} data")
        return hf_dataset.load_saved_dataset(path, text_column, label_column, dataset_split=dataset_split)
    return data_format.load(path, text_column, label_column)
