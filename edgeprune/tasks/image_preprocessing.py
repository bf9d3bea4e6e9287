"""Images into the tensor a vision model was trained on, through transformers' own image processor for the model
folder (its `preprocessor_config.json`), checked against the model's channel count and image size.

The image processor does the resizing, rescaling and normalizing exactly as the model's authors configured it
(any number of channels, any mean and std, convert-to-RGB or not); edgeprune only decodes each file into the
Pillow mode that gives the model its channel count (grayscale "L" for one channel), and describes the steps in
`preprocessing.json` for the app that feeds the artifact.
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from edgeprune.errors import UserInputError
from edgeprune.tasks.compatibility import read_config

if TYPE_CHECKING:
    from PIL import Image

# a model's num_channels -> the Pillow mode its images are decoded into before the processor sees them
CHANNEL_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}
DEFAULT_MEAN_STD = 0.5  # ViT's own defaults (per channel) when the model folder has no preprocessor_config.json
PREPROCESSING_VERSION = 2  # of preprocessing.json; 1 had fixed RGB and a `channels` string


@dataclass(frozen=True)
class ImagePreprocessing:
    """What an app must do to an image before the artifact sees it, in order (written as preprocessing.json)."""

    mode: str  # 1. decode and convert to this Pillow mode: "L" (grayscale, ITU-R 601-2 luma from colour), "RGB", ...
    resize: dict[str, int] | None  # 2. resize to this (the processor's size: height/width or shortest_edge); None: no
    resample: str  # the resize filter, a Pillow name (bilinear, bicubic, ...)
    center_crop: dict[str, int] | None  # 3. then crop the centre to this height/width; None: no crop
    rescale: float  # 4. multiply the 0..255 pixel values by this (1.0: the processor does not rescale)
    mean: list[float]  # 5. subtract per channel (one value: every channel); empty: the processor does not normalize
    std: list[float]  # and divide per channel
    channels: int  # the tensor is float32 [1, channels, height, width], channels first
    height: int
    width: int
    version: int = PREPROCESSING_VERSION


def channel_mode(folder: Path, channels: int) -> str:
    if channels not in CHANNEL_MODES:
        raise UserInputError(f"the model in {folder} takes {channels} image channels (config.json num_channels); "
                             f"image files give 1 (grayscale), 2 (grayscale + alpha), 3 (RGB) or 4 (RGBA)")
    return CHANNEL_MODES[channels]


def model_image_size(config: Any) -> tuple[int, int]:
    size = getattr(config, "image_size", 224)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return int(height), int(width)


def image_processor_for(folder: Path) -> Any:  # a transformers image processor
    """The model folder's own image processor (offline), or ViT's defaults sized to the model when it has none.

    Pillow backend on purpose: it gives the same pixels whether or not torchvision is installed (transformers
    picks torchvision when it is, whose antialiased resize differs in the last bits), and preprocessing.json
    then describes Pillow steps an app can follow.
    """
    config = read_config(folder)
    channels = int(getattr(config, "num_channels", 3))
    mode = channel_mode(folder, channels)
    settings = folder / "preprocessor_config.json"
    if settings.is_file():
        from transformers import AutoImageProcessor

        try:
            processor = AutoImageProcessor.from_pretrained(folder, backend="pil", local_files_only=True)
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as error:
            message = " ".join(str(error).split())[:300]
            raise UserInputError(f"cannot load the image processor of {folder} from {settings.name}: {message}"
                                 ) from None
    else:
        from transformers.models.vit import ViTImageProcessorPil

        height, width = model_image_size(config)
        processor = ViTImageProcessorPil(size={"height": height, "width": width},
                                         image_mean=[DEFAULT_MEAN_STD] * channels,
                                         image_std=[DEFAULT_MEAN_STD] * channels)
    check_processor(folder, processor, mode, channels)
    return processor


def _per_channel(values: Any) -> list[float]:
    return [float(v) for v in values] if isinstance(values, list | tuple) else [float(values)]


def check_processor(folder: Path, processor: Any, mode: str, channels: int) -> None:
    """The processor's settings must agree with the model's channel count: one clean line when they do not."""
    where = f"{folder / 'preprocessor_config.json'}"
    if getattr(processor, "do_convert_rgb", None) and channels != 3:
        raise UserInputError(f"{where} converts every image to RGB (do_convert_rgb: true), but the model takes "
                             f"{channels} channel{'s' if channels != 1 else ''} (config.json num_channels); set "
                             "do_convert_rgb to false")
    if not getattr(processor, "do_normalize", False):
        return
    for name in ("image_mean", "image_std"):
        try:
            values = _per_channel(getattr(processor, name))
        except (TypeError, ValueError) as error:
            raise UserInputError(f"{where}: {name} must be numbers ({error})") from None
        if len(values) not in (1, channels):
            raise UserInputError(f"{where} gives {len(values)} {name} values {values}, but the model takes {channels} "
                                 f"channel{'s' if channels != 1 else ''} (config.json num_channels, images decoded as "
                                 f"{mode!r}); give one value per channel")
        if not all(math.isfinite(v) for v in values) or (name == "image_std" and not all(v > 0 for v in values)):
            raise UserInputError(f"{where}: {name} {values} must be finite{' and positive' * (name == 'image_std')}")


def preprocessing_of(processor: Any, folder: Path) -> ImagePreprocessing:
    """The steps of `processor` for the model in `folder`, as an app follows them."""
    config = read_config(folder)
    channels = int(getattr(config, "num_channels", 3))
    height, width = model_image_size(config)
    settings = processor.to_dict()
    resample = settings.get("resample")
    resample_name = getattr(resample, "name", None)
    if resample_name is None and resample is not None:
        from PIL import Image

        resample_name = Image.Resampling(int(resample)).name
    normalize = bool(settings.get("do_normalize"))
    return ImagePreprocessing(
        mode=channel_mode(folder, channels),
        resize=dict(settings["size"]) if settings.get("do_resize") and settings.get("size") else None,
        resample=(resample_name or "bilinear").lower(),
        center_crop=dict(settings["crop_size"]) if settings.get("do_center_crop") and settings.get("crop_size")
        else None,
        rescale=float(settings.get("rescale_factor", 1 / 255)) if settings.get("do_rescale") else 1.0,
        mean=_per_channel(settings.get("image_mean")) if normalize else [],
        std=_per_channel(settings.get("image_std")) if normalize else [],
        channels=channels, height=height, width=width)


def preprocessing_for(folder: Path) -> ImagePreprocessing:
    """The preprocessing the model in `folder` expects (its image processor's steps), checked against the model."""
    return preprocessing_of(image_processor_for(folder), folder)


def pixel_values(images: "list[Image.Image]", processor: Any, preprocessing: ImagePreprocessing,
                 sources: list[str] | None = None) -> torch.Tensor:
    """[N, channels, height, width] float32 from images already in `preprocessing.mode`, through `processor`.

    A processor whose output does not have the model's shape (no resize, a size or crop other than the model's
    image size) is a user error naming the first image it fails on.
    """
    expected = (preprocessing.channels, preprocessing.height, preprocessing.width)
    try:
        arrays = processor(images=images, return_tensors=None)["pixel_values"]
    except (ValueError, TypeError) as error:
        message = " ".join(str(error).split())[:300]
        raise UserInputError(f"the model's image processor cannot process the images ({message}); check "
                             "preprocessor_config.json against the model's config.json") from None
    tensors = []
    for index, array in enumerate(arrays):
        tensor = torch.as_tensor(array, dtype=torch.float32)
        if tuple(tensor.shape) != expected:
            name = sources[index] if sources else f"image {index}"
            raise UserInputError(
                f"the model's image processor turns {name} into a {list(tensor.shape)} tensor, but the model takes "
                f"{list(expected)} (config.json num_channels and image_size); make preprocessor_config.json resize "
                f"(do_resize, size) or crop (crop_size) to {preprocessing.height}x{preprocessing.width}")
        tensors.append(tensor)
    return torch.stack(tensors) if tensors else torch.empty(0, *expected)
