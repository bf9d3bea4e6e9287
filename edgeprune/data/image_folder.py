"""A folder with one sub-folder of images per class; every image is decoded once at load, so a broken file is
reported before any work starts."""

from pathlib import Path

from edgeprune.data.base import (
    IMAGE_SUFFIXES,
    DataFormat,
    Examples,
    LabeledImage,
    check_folder_columns,
    no_usable_files,
    scan_label_folders,
)
from edgeprune.data.images import DECODE_ERRORS, decode_failure, decode_image
from edgeprune.errors import UserInputError

EXPECTED = "one sub-folder per class holding images (.jpg, .png, ...), e.g. photos/cat/001.jpg"


def load_image_folder(path: Path, text_column: str = "text", label_column: str | None = "label") -> Examples:
    """The `image-folder` format: classes are sub-folder names; with `label_column=None` they are dropped."""
    check_folder_columns(path, text_column, label_column)
    files = scan_label_folders(path).image
    if not files:
        raise no_usable_files(path, EXPECTED)
    broken = []
    for label, file in files:
        try:
            decode_image(file)
        except DECODE_ERRORS as error:
            broken.append(f"{label}/{file.name} ({decode_failure(error)})")
    if broken:
        shown = "; ".join(broken[:5]) + (f"; and {len(broken) - 5} more" if len(broken) > 5 else "")
        raise UserInputError(f"{len(broken)} of {len(files)} images in {path} do not decode: {shown}; "
                             "replace them with valid images or remove them")
    labelled = label_column is not None
    items = [LabeledImage(str(file), label if labelled else "", f"{label}/{file.name}") for label, file in files]
    return Examples(items, "image", labelled, str(path), "image-folder")


FORMAT = DataFormat("image-folder", "image", folder=True, suffixes=IMAGE_SUFFIXES, load=load_image_folder)
