"""Image models with other than three channels: a 1-channel (grayscale) ViT with its own preprocessor_config.json
is fed exactly what transformers' image processor gives, fits end to end through the CLI, and settings that do not
match the model's channels are one clean line, exit 2."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from edgeprune.cli import main
from edgeprune.tasks import make_task
from edgeprune.tasks.base import input_signature, split_items
from tests.test_fit_integration import NO_RECOVERY

MEAN, STD = 0.45, 0.2
BRIGHTNESS = {"dark": (0, 70), "mid": (90, 160), "light": (180, 256)}  # class -> range of its pixel values


def gray_vit_dir(folder: Path, **processor: object) -> Path:
    """A tiny random 1-channel ViT (16x16 inputs) with a grayscale preprocessor_config.json; `processor` overrides."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
                       patch_size=4, num_channels=1, attn_implementation="eager")
    ViTModel(config).eval().save_pretrained(folder)
    settings = {"image_processor_type": "ViTImageProcessor", "do_resize": True, "size": {"height": 16, "width": 16},
                "resample": 2, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
                "image_mean": [MEAN], "image_std": [STD], "do_convert_rgb": False, **processor}
    (folder / "preprocessor_config.json").write_text(json.dumps(settings))
    return folder


def write_brightness_folder(folder: Path, per_class: int = 6, mode: str = "L") -> Path:
    """PNGs of noise, 20x24 (so the processor resizes them), darker or lighter by class; `mode` "RGB" writes the
    same gray levels as colour images."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, (low, high) in BRIGHTNESS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(low, high, size=(20, 24), dtype=np.uint8)
            Image.fromarray(pixels, "L").convert(mode).save(folder / name / f"{i}.png")
    return folder


def test_pixels_are_what_the_models_own_image_processor_gives(tmp_path):
    from PIL import Image
    from transformers import AutoImageProcessor

    model = gray_vit_dir(tmp_path / "vit")
    images = write_brightness_folder(tmp_path / "images")
    Image.new("L", (7, 5), 200).save(images / "mid" / "flat.png")  # a uniform image stays uniform when resized
    task = make_task("image-classification", model, images)
    assert input_signature(task)[0].shape == [1, 1, 16, 16]
    processor = AutoImageProcessor.from_pretrained(model, backend="pil")
    pixels_by_source = {}
    for split in ("calibration", "validation", "test"):
        items = split_items(task, split)
        expected = processor(images=[Image.open(item.path) for item in items], return_tensors="pt")["pixel_values"]
        assert torch.equal(task.encode(split)["pixel_values"], expected)
        pixels_by_source.update(zip((item.source for item in items), task.encode(split)["pixel_values"], strict=True))
    assert len(pixels_by_source) == 19  # 3 classes x 6 + the flat one
    # independent of transformers: (value * rescale - mean) / std, everywhere
    assert torch.allclose(pixels_by_source["mid/flat.png"], torch.full((1, 16, 16), (200 / 255 - MEAN) / STD))
    assert task.preprocessing.mode == "L" and task.preprocessing.mean == [MEAN] and task.preprocessing.channels == 1


def test_colour_images_are_converted_for_a_grayscale_model(tmp_path):
    from PIL import Image
    from transformers import AutoImageProcessor

    model = gray_vit_dir(tmp_path / "vit")
    task = make_task("image-classification", model, write_brightness_folder(tmp_path / "rgb", mode="RGB"))
    items = split_items(task, "test")
    processor = AutoImageProcessor.from_pretrained(model, backend="pil")
    gray = [Image.open(item.path).convert("L") for item in items]
    assert Image.open(items[0].path).mode == "RGB"
    assert torch.equal(task.encode("test")["pixel_values"], processor(images=gray, return_tensors="pt")["pixel_values"])


@pytest.mark.parametrize("settings,expected", [
    ({"image_mean": [0.5, 0.5]}, "gives 2 image_mean values [0.5, 0.5], but the model takes 1 channel"),
    ({"image_std": [0.2, 0.2, 0.2]}, "gives 3 image_std values"),
    ({"do_convert_rgb": True}, "converts every image to RGB (do_convert_rgb: true), but the model takes 1 channel"),
    ({"size": {"height": 32, "width": 32}}, "into a [1, 32, 32] tensor, but the model takes [1, 16, 16]"),
    ({"image_std": [0.0]}, "image_std [0.0] must be finite and positive"),
])
def test_processor_settings_that_do_not_fit_the_model_are_one_line_exit_2(settings, expected, tmp_path, capsys):
    model = gray_vit_dir(tmp_path / "vit", **settings)
    images = write_brightness_folder(tmp_path / "images", per_class=3)
    out = tmp_path / "fit"
    capsys.readouterr()  # what writing the model printed
    code = main(["fit", *NO_RECOVERY, "--task", "image-classification", "--model", str(model), "--data", str(images),
                 "--quiet", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("edgeprune: error: ") and expected in err, err
    assert not out.exists() and not list(tmp_path.glob(".fit.partial*"))


@pytest.mark.integration
def test_a_grayscale_vit_fits_end_to_end_and_its_folder_feeds_an_app(tmp_path, capsys):
    from PIL import Image
    from transformers import AutoImageProcessor

    from edgeprune.export import load_artifact

    model, images = gray_vit_dir(tmp_path / "vit"), write_brightness_folder(tmp_path / "images")
    out = tmp_path / "fit"
    code = main(["fit", *NO_RECOVERY, "--task", "image-classification", "--model", str(model), "--data", str(images),
                 "--device", "host", "--max-mb", "5", "--recipe", "fp32", "--ffn-fractions", "0",
                 "--layer-removals", "0", "--scoring-examples", "8", "--quiet", "--json", "--out", str(out)])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result.get("message")
    signature = json.loads((out / "model.json").read_text())
    assert [(i["name"], i["shape"], i["dtype"]) for i in signature["inputs"]] == [("pixel_values", [1, 1, 16, 16],
                                                                                   "float32")]
    preprocessing = json.loads((out / "preprocessing.json").read_text())
    assert {k: preprocessing[k] for k in ("mode", "channels", "mean", "std", "resize")} == {
        "mode": "L", "channels": 1, "mean": [MEAN], "std": [STD], "resize": {"height": 16, "width": 16}}
    # an app: the shipped processor and labels, a PNG in, the artifact's logits out, the same as the fit measured
    # an app: the shipped processor and labels, the test split's PNGs in, the artifact's logits out, gives the
    # test top-1 the fit reported
    labels = json.loads((out / "labels.json").read_text())["labels"]
    processor = AutoImageProcessor.from_pretrained(out, backend="pil")
    program = load_artifact(out / "model.pte")
    test_items = split_items(make_task("image-classification", model, images), "test")  # the same seeded split
    correct = 0
    for item in test_items:
        (logits,) = program(processor(images=Image.open(item.path), return_tensors="pt")["pixel_values"])
        correct += labels[int(logits.argmax())] == item.label
    assert result["fitted"]["test_accuracy"] == pytest.approx(correct / len(test_items))
    assert result["fitted"]["test_accuracy"] > 1 / len(labels)  # brightness is easy: better than chance
