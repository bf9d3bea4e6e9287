"""Decoding one image file with Pillow: a leaf module, so the data values (`LabeledImage`) and the image-folder
format both use it without importing each other."""

from pathlib import Path

from PIL import Image, UnidentifiedImageError

from edgeprune.errors import UserInputError

DECODE_ERRORS = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)  # what Pillow raises on bad files


def decode_image(path: Path) -> Image.Image:
    """The image as RGB; Pillow's own errors (DECODE_ERRORS) pass through."""
    with Image.open(path) as image:
        return image.convert("RGB")  # convert() decodes the whole image, so truncated files fail here


def decode_failure(error: Exception) -> str:
    """Why Pillow could not decode a file, in a few words."""
    if isinstance(error, UnidentifiedImageError):
        return "Pillow cannot identify it as an image"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror  # permission denied, no such file: without the path, which the message names anyway
    return str(error)


def decode_rgb(path: Path) -> Image.Image:
    """An image file decoded with Pillow, as RGB; an unreadable or broken file is a user error naming it."""
    try:
        return decode_image(path)
    except DECODE_ERRORS as error:
        raise UserInputError(f"image {path} does not decode ({decode_failure(error)}); replace it with a valid "
                             "image or remove it") from None
