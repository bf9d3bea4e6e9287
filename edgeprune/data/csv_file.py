"""CSV and TSV files: a header row naming the columns, then one example per row."""

import csv
import io
from pathlib import Path

from edgeprune.data.base import DataFormat, Examples, LabeledText, missing_column, read_text
from edgeprune.errors import UserInputError

DELIMITERS = (",", "\t", ";", "|")
FIELD_LIMIT = 1 << 26  # characters in one field; the csv module's default (131,072) refuses long documents


def header_delimiter(text: str) -> str:
    """The delimiter is the candidate seen most often in the header row (column names rarely hold one by accident);
    a header without any names a single-column file."""
    header = text.split("\n", 1)[0]
    counts = {d: header.count(d) for d in DELIMITERS}
    best = max(DELIMITERS, key=lambda d: counts[d])
    return best if counts[best] else "\x1f"  # one column: a separator that cannot occur in text


def load_csv(path: Path, text_column: str = "text", label_column: str | None = "label") -> Examples:
    """Columns are matched by exact name (surrounding spaces ignored); `.tsv` files are tab-separated.

    Rows with an empty text are skipped and counted; a row without a label, when there is a label column, is an error.
    """
    content = read_text(path, what="CSV file")
    if not content.strip():
        raise UserInputError(f"CSV file {path} is empty; it needs a header row naming its columns (such as "
                             f"{text_column!r}) and one row per example")
    delimiter = "\t" if path.suffix.lower() == ".tsv" else header_delimiter(content)
    # strict: a stray or unclosed quote is an error with its line, not rows silently merged into one field
    reader = csv.reader(io.StringIO(content, newline=""), delimiter=delimiter, strict=True)
    documents, rows, skipped, last_line = [], 0, 0, 0
    default_field_limit = csv.field_size_limit(FIELD_LIMIT)
    try:
        columns = [name.strip() for name in next(reader)]
        last_line = reader.line_num
        if text_column not in columns:
            raise missing_column("CSV file", path, text_column, "text", columns)
        if label_column is not None and label_column not in columns:
            raise missing_column("CSV file", path, label_column, "label", columns)
        text_at = columns.index(text_column)
        label_at = columns.index(label_column) if label_column is not None else None
        for row in reader:
            record_start, last_line = last_line + 1, reader.line_num
            if not any(value.strip() for value in row):
                continue  # a blank line
            rows += 1
            text = row[text_at].strip() if text_at < len(row) else ""
            if not text:
                skipped += 1
                continue
            label = ""
            if label_at is not None:
                label = row[label_at].strip() if label_at < len(row) else ""
                if not label:
                    raise UserInputError(f"CSV file {path} line {record_start}: no label in column "
                                         f"{label_column!r}; give every row a label, or remove the rows without one")
            documents.append(LabeledText(text, label, f"{path.name}:{record_start}"))
    except csv.Error as error:
        raise UserInputError(f"CSV file {path} line {last_line + 1} cannot be parsed ({error}); "
                             'check its quoting: a field with a delimiter, quote or line break goes in "double '
                             'quotes", and a quote inside it is written twice ("")') from None
    finally:
        csv.field_size_limit(default_field_limit)
    if not rows:
        raise UserInputError(f"CSV file {path} has a header but no rows; add one row per example")
    if not documents:
        raise UserInputError(f"CSV file {path}: column {text_column!r} is empty in all {rows} rows; "
                             "name the column that holds the text with --text-column")
    return Examples(documents, "text", label_column is not None, str(path), "csv", skipped)


FORMAT = DataFormat("csv", "text", folder=False, suffixes=(".csv", ".tsv"), load=load_csv)
