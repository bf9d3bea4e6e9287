"""Data in: user data in five formats (and in-memory `datasets.Dataset`s) behind one `load_examples`, and a
deterministic split."""

from edgeprune.data.base import DataFormat, Examples, LabeledImage, LabeledText
from edgeprune.data.bbc import load_bbc_news, load_text_folder
from edgeprune.data.formats import FORMATS, detect_format, load_examples
from edgeprune.data.hf_dataset import examples_from_dataset, is_dataset
from edgeprune.data.images import decode_rgb
from edgeprune.data.split import (
                                  SPLIT_NAMES,
                                  DataSplits,
                                  SplitRatios,
                                  check_calibration_labels,
                                  describe_split,
                                  random_split,
                                  split_examples,
                                  stratified_split,
)

__all__ = ["FORMATS", "SPLIT_NAMES", "DataFormat", "DataSplits", "Examples", "LabeledImage", "LabeledText",
           "SplitRatios", "check_calibration_labels", "decode_rgb", "describe_split", "detect_format",
           "examples_from_dataset", "is_dataset",
           "load_bbc_news", "load_examples", "load_text_folder", "random_split", "split_examples",
           "stratified_split"]
