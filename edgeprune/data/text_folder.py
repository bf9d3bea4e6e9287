"""A folder with one sub-folder of UTF-8 `.txt` files per label; one file is one example."""

from pathlib import Path

from edgeprune.data.base import (
    TEXT_SUFFIXES,
    DataFormat,
    Examples,
    LabeledText,
    check_folder_columns,
    no_usable_files,
    read_text,
    scan_label_folders,
)
from edgeprune.errors import UserInputError

EXPECTED = "one sub-folder per label holding .txt files, e.g. reviews/positive/001.txt"


def read_text_folder(folder: Path, *, labelled: bool = True, fallback_encoding: str | None = None) -> Examples:
    """Read in sorted order, so the result does not depend on the file system; empty files are skipped and counted."""
    files = scan_label_folders(folder).text
    if not files:
        raise no_usable_files(folder, EXPECTED)
    documents, skipped = [], 0
    for label, file in files:
        text = read_text(file, what="text file", fallback_encoding=fallback_encoding).strip()
        if not text:
            skipped += 1
            continue
        documents.append(LabeledText(text, label if labelled else "", f"{label}/{file.name}"))
    if not documents:
        raise UserInputError(f"data folder {folder} holds {len(files)} .txt files but every one is empty; "
                             "put the text of each example in its file")
    return Examples(documents, "text", labelled, str(folder), "text-folder", skipped)


def load_text_folder_examples(path: Path, text_column: str = "text", label_column: str | None = "label") -> Examples:
    """The `text-folder` format: labels are sub-folder names; with `label_column=None` they are dropped."""
    check_folder_columns(path, text_column, label_column)
    return read_text_folder(path, labelled=label_column is not None)


def load_text_folder(folder: Path) -> list[LabeledText]:
    """The labelled documents of a text folder (the bundled task's loader)."""
    return read_text_folder(Path(folder)).items


FORMAT = DataFormat("text-folder", "text", folder=True, suffixes=TEXT_SUFFIXES, load=load_text_folder_examples)
