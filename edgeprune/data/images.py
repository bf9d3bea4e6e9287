"""Decoding one image (a file, or the encoded bytes of an in-memory data set) with Pillow: a leaf module, so the
data values (`LabeledImage`) and the image formats all use it without importing each other."""

import io
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from edgeprune.errors import UserInputError

DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)  # what Pillow raises on bad files


def decode_image(source: Path | bytes, mode: str = "RGB") -> Image.Image:
    """The image converted to the Pillow `mode` ("RGB"; "L" is grayscale, ITU-R 601-2 luma when the file is in
    colour); `source` is a file or an encoded image (PNG, JPEG, ...). Pillow's own errors (DECODE_ERRORS) pass
    through."""
    with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as image:
        return image.convert(mode)  # convert() decodes the whole image, so truncated files fail here


def decode_failure(error: Exception) -> str:
    """Why Pillow could not decode a file, in a few words."""
    if isinstance(error, UnidentifiedImageError):
        return "Pillow cannot identify it as an image"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror  # permission denied, no such file: without the path, which the message names anyway
    return str(error)


def decode_as(source: Path | bytes, mode: str, name: str | None = None) -> Image.Image:
    """An image decoded with Pillow into `mode`; an unreadable or broken image is a user error naming it (`name`,
    else the file)."""
    try:
        return decode_image(source, mode)
    except DECODE_ERRORS as error:
        raise UserInputError(f"image {name or source} does not decode ({decode_failure(error)}); replace it with a "
                             "valid image or remove it") from None


def decode_rgb(path: Path) -> Image.Image:
    """An image file decoded with Pillow, as RGB; an unreadable or broken file is a user error naming it."""
    return decode_as(path, "RGB")
