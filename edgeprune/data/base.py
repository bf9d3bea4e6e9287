"""What every data format loads into, and the checks the formats share (reading files, labels, label folders)."""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from edgeprune.errors import UserInputError

if TYPE_CHECKING:
    from PIL import Image

ExampleKind = Literal["text", "image"]

TEXT_SUFFIXES = (".txt",)
IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class LabeledText:
    text: str
    label: str  # "" when the data is unlabelled
    source: str  # where it came from, for the record


@dataclass(frozen=True)
class LabeledImage:
    path: str  # the image file, decoded on demand ("" when the image came in memory, as `encoded`)
    label: str  # "" when the data is unlabelled
    source: str  # <class>/<file name>, or where in an in-memory data set; for the record
    encoded: bytes | None = field(default=None, repr=False, compare=False)  # the image file's bytes (PNG, JPEG, ...)
    digest: str = ""  # of `encoded`: records (and the cache keys made from them) change when the image does

    def load(self, mode: str = "RGB") -> "Image.Image":
        """The image decoded with Pillow and converted to `mode` ("RGB", "L" for grayscale, ...)."""
        from edgeprune.data.images import decode_as  # Pillow is imported only when an image is loaded

        if self.encoded is not None:
            return decode_as(self.encoded, mode, self.source)
        return decode_as(Path(self.path), mode)

    def load_rgb(self) -> "Image.Image":
        """The image decoded with Pillow and converted to RGB."""
        return self.load("RGB")


@dataclass(frozen=True)
class Examples:
    items: list[LabeledText] | list[LabeledImage]
    kind: ExampleKind
    labelled: bool  # False: every label is "" (embedding and causal-LM data)
    source: str  # the path the user gave
    format: str  # the data format's registry name
    skipped: int = 0  # rows or files left out because their text was empty

    def __len__(self) -> int:
        return len(self.items)

    @property
    def labels(self) -> list[str]:
        """The distinct labels, sorted; empty for unlabelled data."""
        return sorted({item.label for item in self.items}) if self.labelled else []


Loader = Callable[[Path, str, str | None], Examples]  # (path, text column, label column or None) -> examples


@dataclass(frozen=True)
class DataFormat:
    name: str  # the registry name, e.g. "csv"
    kind: ExampleKind | Literal["text or image"]  # the latter: the data itself says which
    folder: bool  # True: a folder (one sub-folder per label, or a format's own layout); False: a single file
    suffixes: tuple[str, ...]  # a file's own suffix, or for a folder the suffixes of the files in its sub-folders
    load: Loader
    detect: Callable[[Path], bool] | None = None  # for a folder with its own layout: whether a folder is one


@dataclass(frozen=True)
class LabelFolders:
    """The files of a folder with one sub-folder per label, by kind: (label, file) pairs in sorted order."""

    text: list[tuple[str, Path]] = field(default_factory=list)
    image: list[tuple[str, Path]] = field(default_factory=list)


def require_exists(path: Path) -> None:
    if not path.exists():
        raise UserInputError(f"data path {path} does not exist; give a CSV or JSONL file, or a folder with one "
                             "sub-folder per label")


def read_text(path: Path, *, what: str = "file", fallback_encoding: str | None = None) -> str:
    """Read a UTF-8 file (a byte-order mark is dropped); unreadable or non-UTF-8 files are user errors.

    `fallback_encoding` is for bundled corpora known to hold a few files in a legacy encoding.
    """
    try:
        data = path.read_bytes()
    except PermissionError:
        raise UserInputError(f"cannot read {what} {path}: permission denied; make it readable") from None
    except OSError as error:
        raise UserInputError(f"cannot read {what} {path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        if fallback_encoding is not None:
            return data.decode(fallback_encoding)
        line = data[:error.start].count(b"\n") + 1
        raise UserInputError(f"{what} {path} is not UTF-8 text (byte 0x{data[error.start]:02x} at line {line}); "
                             "save it as UTF-8") from None


def missing_column(what: str, path: Path | str, column: str, role: str, columns: list[str]) -> UserInputError:
    """`what` and `path` name the data ("CSV file", "data/x.csv"); either may be "" when the other says it all."""
    advice = f"name the {role} column with --{role}-column"
    if role == "label":
        advice += " (unlabelled data, e.g. for the embedding and causal-lm tasks, needs none)"
    where = " ".join(part for part in (what, str(path)) if part)
    return UserInputError(f"{where} has no column {column!r}; its columns are: "
                          f"{', '.join(repr(c) for c in columns) or 'none'}; {advice}")


def label_string(value: object) -> str | None:
    """A label as text: strings are stripped, numbers and booleans written as in JSON; None when there is none."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    raise TypeError(f"a label must be a string or a number, got {type(value).__name__}")


def check_folder_columns(folder: Path, text_column: str, label_column: str | None) -> None:
    """Folders take their labels from sub-folder names; a column name given for them is a mistake worth saying."""
    if text_column != "text" or label_column not in ("label", None):
        raise UserInputError(f"{folder} is a folder: its labels are its sub-folder names, so a text column "
                             f"({text_column!r}) or label column ({label_column!r}) does not apply; column names "
                             "are for CSV and JSONL files")


def scan_label_folders(folder: Path) -> LabelFolders:
    """The text and image files in the sub-folders of `folder`; hidden files and folders are ignored.

    A folder that mixes text files and images is refused: which of the two it is meant to be is the user's call.
    """
    if not folder.is_dir():
        require_exists(folder)
        raise UserInputError(f"{folder} is a file; a folder format needs a folder with one sub-folder per label")
    found = LabelFolders()
    try:
        label_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        for label_dir in label_dirs:
            for file in sorted(p for p in label_dir.iterdir() if not p.name.startswith(".") and not p.is_dir()):
                suffix = file.suffix.lower()
                if suffix in TEXT_SUFFIXES:
                    found.text.append((label_dir.name, file))
                elif suffix in IMAGE_SUFFIXES:
                    found.image.append((label_dir.name, file))
    except PermissionError as error:
        raise UserInputError(f"cannot list folder {error.filename}: permission denied; make it readable") from None
    if found.text and found.image:
        text_file, image_file = found.text[0][1], found.image[0][1]
        raise UserInputError(
            f"data folder {folder} mixes text files and images ({len(found.text)} .txt files such as "
            f"{text_file.relative_to(folder)}, {len(found.image)} images such as {image_file.relative_to(folder)}); "
            "keep one kind: <label>/*.txt for text, or <class>/*.jpg|png for images")
    return found


def no_usable_files(folder: Path, expected: str) -> UserInputError:
    return UserInputError(f"data folder {folder} holds no usable files; expected {expected}")
