"""Image classification on a folder of images per class: preprocessing, top-1/top-5, heads, bad images."""

import pytest
import torch

from edgeprune.errors import UserInputError
from edgeprune.tasks import make_task
from edgeprune.tasks.base import input_signature
from edgeprune.tasks.image_preprocessing import image_processor_for, pixel_values, preprocessing_for
from tests._byo import tiny_vit_dir, write_image_folder


def test_a_plain_vit_gets_a_linear_head_on_cls_and_learns_the_colours(tmp_path):
    images = write_image_folder(tmp_path / "images")
    task = make_task("image-classification", tiny_vit_dir(tmp_path / "vit"), images)
    teacher = task.teacher()
    assert not task.uses_own_head and task.labels == ["blue", "green", "red"]
    assert input_signature(task)[0].shape == [1, 3, 16, 16]
    assert teacher.test.metric == "top1" and teacher.validation.value == 1.0  # colours are easy
    assert teacher.test.details["top3"] == 1.0  # top-5 is capped at the 3 classes


def test_the_models_own_head_must_name_the_image_folders(tmp_path):
    images = write_image_folder(tmp_path / "images")
    task = make_task("image-classification", tiny_vit_dir(tmp_path / "vit", ["red", "green", "blue"]), images)
    assert task.uses_own_head and task.labels == ["red", "green", "blue"]
    (logits,) = task.teacher().model(task.example_inputs("test", 1)[0][0])
    assert logits.shape == (1, 3)
    wrong = make_task("image-classification", tiny_vit_dir(tmp_path / "vit2", ["cat", "dog", "bird"]), images)
    with pytest.raises(UserInputError, match=r"named \['blue', 'green', 'red'\].*--head fit"):
        wrong.teacher()


def test_preprocessing_follows_the_folders_config(tmp_path):
    from PIL import Image

    folder = tiny_vit_dir(tmp_path / "vit")
    (folder / "preprocessor_config.json").write_text('{"size": {"height": 16, "width": 16}, "image_mean": [0, 0, 0], '
                                                     '"image_std": [1, 1, 1], "rescale_factor": 0.00392156862745098}')
    preprocessing = preprocessing_for(folder)
    white = pixel_values([Image.new("RGB", (40, 30), (255, 255, 255))], image_processor_for(folder), preprocessing)
    assert white.shape == (1, 3, 16, 16) and torch.allclose(white, torch.ones_like(white))


def test_an_image_that_does_not_decode_is_named(tmp_path):
    images = write_image_folder(tmp_path / "images")
    (images / "red" / "broken.png").write_bytes(b"not an image")
    with pytest.raises(UserInputError, match="broken.png"):
        make_task("image-classification", tiny_vit_dir(tmp_path / "vit"), images).teacher()
