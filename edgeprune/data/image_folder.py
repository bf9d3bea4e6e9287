"""A folder with one sub-folder of images per class; every image is decoded once at load, so a broken file is
reported before any work starts."""

from pathlib import Path

from PIL import Image, UnidentifiedImageError

from edgeprune.data.base import (
    IMAGE_SUFFIXES,
    DataFormat,
    Examples,
    LabeledImage,
    check_folder_columns,
    no_usable_files,
    scan_label_folders,
)
from edgeprune.errors import UserInputError

EXPECTED = "one sub-folder per class holding images (.jpg, .png, ...), e.g. photos/cat/001.jpg"


DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)  # what Pillow raises on bad files


def _decode(path: Path) -> Image.Image:
    with Image.open(path) as image:
        return image.convert("RGB")  # convert() decodes the whole image, so truncated files fail here


def _reason(error: Exception) -> str:
    if isinstance(error, UnidentifiedImageError):
        return "Pillow cannot identify it as an image"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror  # permission denied, no such file: without the path, which the message names anyway
    return str(error)


def decode_rgb(path: Path) -> Image.Image:
    """An image file decoded with Pillow, as RGB; an unreadable or broken file is a user error naming it."""
    try:
        return _decode(path)
    except DECODE_ERRORS as error:
        raise UserInputError(f"image {path} does not decode ({_reason(error)}); replace it with a valid image or "
                             "remove it") from None


def load_image_folder(path: Path, text_column: str = "text", label_column: str | None = "label") -> Examples:
    """The `image-folder` format: classes are sub-folder names; with `label_column=None` they are dropped."""
    check_folder_columns(path, text_column, label_column)
    files = scan_label_folders(path).image
    if not files:
        raise no_usable_files(path, EXPECTED)
    broken = []
    for label, file in files:
        try:
            _decode(file)
        except DECODE_ERRORS as error:
            broken.append(f"{label}/{file.name} ({_reason(error)})")
    if broken:
        shown = "; ".join(broken[:5]) + (f"; and {len(broken) - 5} more" if len(broken) > 5 else "")
        raise UserInputError(f"{len(broken)} of {len(files)} images in {path} do not decode: {shown}; "
                             "replace them with valid images or remove them")
    labelled = label_column is not None
    items = [LabeledImage(str(file), label if labelled else "", f"{label}/{file.name}") for label, file in files]
    return Examples(items, "image", labelled, str(path), "image-folder")


FORMAT = DataFormat("image-folder", "image", folder=True, suffixes=IMAGE_SUFFIXES, load=load_image_folder)
