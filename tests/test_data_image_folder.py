"""A folder of `<class>/<image>` files in: every image decoded at load, broken ones named, RGB out."""

import io

import pytest
from PIL import Image

from edgeprune.data import LabeledImage, decode_rgb, detect_format, load_examples
from edgeprune.errors import UserInputError


def save_image(path, mode="RGB", size=(8, 6), color=(200, 30, 10), fmt="PNG"):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color).save(path, format=fmt)
    return path


def jpeg_bytes(size=(64, 64)):
    buffer = io.BytesIO()
    Image.linear_gradient("L").resize(size).convert("RGB").save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture
def photos(tmp_path):
    root = tmp_path / "photos"
    save_image(root / "cat" / "b.png")
    save_image(root / "cat" / "a.PNG", mode="L", color=77)
    save_image(root / "dog" / "c.png", mode="RGBA", color=(1, 2, 3, 0))
    (root / "dog" / "d.jpg").write_bytes(jpeg_bytes())
    (root / "dog" / "labels.csv").write_text("not an image, not a text file: ignored")
    return root


def test_classes_from_sub_folders_decoded_to_rgb(photos):
    examples = load_examples(photos)
    assert examples.items == [
        LabeledImage(str(photos / "cat" / "a.PNG"), "cat", "cat/a.PNG"),
        LabeledImage(str(photos / "cat" / "b.png"), "cat", "cat/b.png"),
        LabeledImage(str(photos / "dog" / "c.png"), "dog", "dog/c.png"),
        LabeledImage(str(photos / "dog" / "d.jpg"), "dog", "dog/d.jpg"),
    ]
    assert (examples.kind, examples.labelled, examples.format) == ("image", True, "image-folder")
    assert detect_format(photos) == "image-folder" and examples.labels == ["cat", "dog"]
    gray, red, transparent, photo = (item.load_rgb() for item in examples.items)
    assert {image.mode for image in (gray, red, transparent, photo)} == {"RGB"}
    assert gray.getpixel((0, 0)) == (77, 77, 77) and red.getpixel((7, 5)) == (200, 30, 10)
    assert transparent.getpixel((3, 3)) == (1, 2, 3) and photo.size == (64, 64)


def test_unlabelled_images(photos):
    examples = load_examples(photos, label_column=None)
    assert not examples.labelled and {item.label for item in examples.items} == {""} and len(examples) == 4


def test_images_that_do_not_decode_are_named(photos):
    (photos / "cat" / "noise.png").write_bytes(b"\x00\x01not an image at all" * 10)
    whole = jpeg_bytes()
    (photos / "dog" / "cut.jpg").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(UserInputError, match=r"2 of 6 images in .*photos do not decode: cat/noise\.png \(Pillow "
                                             r"cannot identify it as an image\); dog/cut\.jpg \(Truncated File "
                                             r"Read\)"):
        load_examples(photos)
    with pytest.raises(UserInputError, match=r"image .*noise\.png does not decode \(Pillow cannot identify it"):
        decode_rgb(photos / "cat" / "noise.png")
    with pytest.raises(UserInputError, match=r"image .*cut\.jpg does not decode \(Truncated File Read\)"):
        LabeledImage(str(photos / "dog" / "cut.jpg"), "dog", "dog/cut.jpg").load_rgb()


def test_many_broken_images_are_summarised(tmp_path):
    for index in range(7):
        (tmp_path / "x").mkdir(exist_ok=True)
        (tmp_path / "x" / f"{index}.png").write_bytes(b"broken")
    with pytest.raises(UserInputError, match=r"7 of 7 images .* x/4\.png \(Pillow cannot identify it as an image\); "
                                             r"and 2 more; replace"):
        load_examples(tmp_path)


def test_folder_without_images(tmp_path):
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "notes.md").write_text("no images here")
    with pytest.raises(UserInputError, match=r"holds no usable files; expected one sub-folder per label holding \.txt "
                                             r"files \(text-folder\) or images \(image-folder\)"):
        load_examples(tmp_path)
    with pytest.raises(UserInputError, match=r"holds no usable files; expected one sub-folder per class holding "
                                             r"images \(\.jpg, \.png, \.\.\.\)"):
        load_examples(tmp_path, format="image-folder")


def test_missing_image_file(tmp_path):
    with pytest.raises(UserInputError, match=r"image .*gone\.png does not decode \(No such file or directory\)"):
        decode_rgb(tmp_path / "gone.png")
