"""Data loading and splitting."""

from edgeprune.data.bbc import LabeledText, load_bbc_news, load_text_folder
from edgeprune.data.split import DataSplits, SplitRatios, stratified_split

__all__ = ["DataSplits", "LabeledText", "SplitRatios", "load_bbc_news", "load_text_folder", "stratified_split"]
