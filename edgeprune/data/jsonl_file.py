"""JSON Lines: one JSON object per line, with the text and (optionally) the label as fields."""

import json
from pathlib import Path

from edgeprune.data.base import DataFormat, Examples, LabeledText, label_string, missing_column, read_text
from edgeprune.errors import UserInputError

EXAMPLE_LINE = '{"text": "...", "label": "..."}'


def _records(path: Path, content: str) -> list[tuple[int, dict]]:
    records = []
    for number, line in enumerate(content.split("\n"), start=1):  # not splitlines: JSON strings may hold U+2028
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise UserInputError(f"JSONL file {path} line {number} is not valid JSON ({error.msg} at column "
                                 f"{error.colno}); each line must be one object such as {EXAMPLE_LINE}") from None
        if not isinstance(record, dict):
            raise UserInputError(f"JSONL file {path} line {number} holds a JSON {type(record).__name__}, not an "
                                 f"object; each line must be one object such as {EXAMPLE_LINE}")
        records.append((number, record))
    return records


def load_jsonl(path: Path, text_column: str = "text", label_column: str | None = "label") -> Examples:
    """Labels may be strings or numbers (written as text: 1 -> "1"). Records with an empty text are skipped and
    counted; a record without the label, when some records have it, is an error."""
    records = _records(path, read_text(path, what="JSONL file"))
    if not records:
        raise UserInputError(f"JSONL file {path} has no records; write one object per line such as {EXAMPLE_LINE}")
    keys = list(dict.fromkeys(key for _, record in records for key in record))
    if text_column not in keys:
        raise missing_column("JSONL file", path, text_column, "text", keys)
    if label_column is not None and label_column not in keys:
        raise missing_column("JSONL file", path, label_column, "label", keys)
    documents, skipped = [], 0
    for number, record in records:
        if text_column not in record:
            raise UserInputError(f"JSONL file {path} line {number} has no {text_column!r}; its keys are: "
                                 f"{', '.join(repr(k) for k in record)}; every line needs the text")
        text = record[text_column]
        if text is not None and not isinstance(text, str):
            raise UserInputError(f"JSONL file {path} line {number}: {text_column!r} must be a string, got "
                                 f"{type(text).__name__} {text!r:.40}")
        if not (text or "").strip():
            skipped += 1
            continue
        label = ""
        if label_column is not None:
            try:
                label = label_string(record.get(label_column))
            except TypeError as error:
                raise UserInputError(f"JSONL file {path} line {number}: {error}") from None
            if label is None:
                raise UserInputError(f"JSONL file {path} line {number}: no label in {label_column!r}; give every "
                                     "line a label, or remove the lines without one")
        documents.append(LabeledText(text.strip(), label, f"{path.name}:{number}"))
    if not documents:
        raise UserInputError(f"JSONL file {path}: {text_column!r} is empty in all {len(records)} records; "
                             "name the field that holds the text with --text-column")
    return Examples(documents, "text", label_column is not None, str(path), "jsonl", skipped)


FORMAT = DataFormat("jsonl", "text", folder=False, suffixes=(".jsonl", ".ndjson"), load=load_jsonl)
