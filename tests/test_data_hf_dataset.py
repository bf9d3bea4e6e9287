"""Hugging Face datasets as data: a `datasets.Dataset` in Python and a `save_to_disk` folder on the command line give
the same examples, split and head scores as a CSV of the same rows, with the same column flags."""

import json
import sys

import pytest
import torch

from edgeprune.cli import main
from edgeprune.data import detect_format, load_examples
from edgeprune.errors import UserInputError
from edgeprune.tasks import make_task
from edgeprune.tasks.base import split_items
from tests._byo import TOPICS, tiny_vit_dir, topic_rows, write_csv, write_image_folder

datasets = pytest.importorskip("datasets")


def topic_dataset(columns: tuple[str, str] = ("text", "label"), class_label: bool = False):
    rows = topic_rows()
    text, label = columns
    if not class_label:
        return datasets.Dataset.from_dict({text: [r["text"] for r in rows], label: [r["label"] for r in rows]})
    names = sorted(TOPICS)
    features = datasets.Features({text: datasets.Value("string"), label: datasets.ClassLabel(names=names)})
    return datasets.Dataset.from_dict({text: [r["text"] for r in rows], label: [names.index(r["label"]) for r in rows]},
                                      features=features)


def pairs(examples_or_items):
    items = examples_or_items.items if hasattr(examples_or_items, "items") else examples_or_items
    return [(item.text, item.label) for item in items]


@pytest.mark.parametrize("class_label", [False, True])
def test_a_dataset_gives_the_examples_of_the_csv_of_its_rows(class_label, tmp_path):
    csv = load_examples(write_csv(tmp_path / "d.csv", topic_rows()))
    from_memory = load_examples(topic_dataset(class_label=class_label))
    assert pairs(from_memory) == pairs(csv) and len(from_memory) == 3 * 8
    assert from_memory.kind == "text" and from_memory.labelled and from_memory.format == "hf-dataset"
    assert from_memory.labels == sorted(TOPICS)  # class names, not ClassLabel ids
    topic_dataset(class_label=class_label).save_to_disk(tmp_path / "saved")
    assert detect_format(tmp_path / "saved") == "hf-dataset"
    assert pairs(load_examples(tmp_path / "saved")) == pairs(csv)
    unlabelled = load_examples(topic_dataset(class_label=class_label), label_column=None)
    assert not unlabelled.labelled and {item.label for item in unlabelled.items} == {""}


def test_a_task_on_a_dataset_splits_and_encodes_as_on_the_csv(tiny_bert_dir, tmp_path):
    on_csv = make_task("classification", tiny_bert_dir, write_csv(tmp_path / "d.csv", topic_rows()), max_length=16)
    on_dataset = make_task("classification", tiny_bert_dir, topic_dataset(class_label=True), max_length=16)
    for split in ("calibration", "validation", "test"):
        assert pairs(split_items(on_dataset, split)) == pairs(split_items(on_csv, split))
        for name, tensor in on_csv.encode(split).items():
            assert torch.equal(on_dataset.encode(split)[name], tensor), (split, name)
    assert on_dataset.data_description["path"] == "the datasets.Dataset of 24 rows"


def test_a_dataset_dict_needs_its_split_named_when_it_has_several(tiny_bert_dir, tmp_path):
    both = datasets.DatasetDict(train=topic_dataset(), test=topic_dataset().select(range(3)))
    with pytest.raises(UserInputError, match=r"holds the splits 'train', 'test'; choose one, e\.g\. "
                                             r"dataset_split='train'"):
        load_examples(both)
    assert pairs(load_examples(both, dataset_split="train")) == pairs(load_examples(topic_dataset()))
    with pytest.raises(UserInputError, match="has no split 'validation'; its splits are: 'train', 'test'"):
        load_examples(both, dataset_split="validation")
    assert len(load_examples(datasets.DatasetDict(only=topic_dataset()))) == 24  # one split: no name needed
    task = make_task("classification", tiny_bert_dir, both, dataset_split="train", max_length=16)
    assert task.data_description["dataset_split"] == "train" and len(split_items(task, "test")) > 0
    both.save_to_disk(tmp_path / "saved")
    with pytest.raises(UserInputError, match=f"choose one, e\\.g\\. --data {tmp_path / 'saved' / 'train'}"):
        load_examples(tmp_path / "saved")
    assert pairs(load_examples(tmp_path / "saved" / "test")) == pairs(load_examples(both["test"]))
    assert pairs(load_examples(tmp_path / "saved", dataset_split="test")) == pairs(load_examples(both["test"]))


def test_bad_datasets_are_one_clear_error(tmp_path):
    with pytest.raises(UserInputError, match="the datasets.Dataset of 24 rows has no column 'body'; its columns are: "
                                             "'text', 'label'; name the text column with --text-column"):
        load_examples(topic_dataset(), text_column="body")
    unlabelled_row = datasets.Dataset.from_dict({"text": ["a", "b"], "label": ["x", None]})
    with pytest.raises(UserInputError, match=r"row 1: no label in 'label'"):
        load_examples(unlabelled_row)
    numbers = datasets.Dataset.from_dict({"text": [1, 2], "label": ["x", "y"]})
    with pytest.raises(UserInputError, match=r"column 'text' holds Value\('int64'\), not text or images"):
        load_examples(numbers)
    with pytest.raises(UserInputError, match="streaming"):
        load_examples(topic_dataset().to_iterable_dataset())
    with pytest.raises(UserInputError, match="dataset_split 'train' applies to Hugging Face datasets"):
        load_examples(write_csv(tmp_path / "d.csv", topic_rows()), dataset_split="train")


def test_a_saved_dataset_without_the_datasets_package_is_one_line_naming_it(tmp_path, monkeypatch):
    topic_dataset().save_to_disk(tmp_path / "saved")
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed: `import datasets` raises ImportError
    assert detect_format(tmp_path / "saved") == "hf-dataset"  # told by its files, without the package
    missing = r"needs datasets, which is not installed: pip install 'edgeprune\[datasets\]'"
    with pytest.raises(UserInputError, match=missing):
        load_examples(tmp_path / "saved")


def score_scores(args, tmp_path, capsys):
    out = tmp_path / "scores.json"
    code = main(["score", "--examples", "8", "--max-length", "16", "--quiet", "--out", str(out), *args])
    err = capsys.readouterr().err
    assert code == 0, err
    return json.loads(out.read_text())


def test_the_cli_scores_a_saved_dataset_as_the_csv_with_the_same_column_flags(tiny_bert_dir, tmp_path, capsys):
    columns = ["--text-column", "review", "--label-column", "stars"]
    csv = write_csv(tmp_path / "d.csv", topic_rows(), columns=("review", "stars"))
    topic_dataset(("review", "stars"), class_label=True).save_to_disk(tmp_path / "saved")
    model = ["--model", str(tiny_bert_dir)]
    from_csv = score_scores([*model, "--data", str(csv), *columns], tmp_path, capsys)
    from_folder = score_scores([*model, "--data", str(tmp_path / "saved"), *columns], tmp_path, capsys)
    assert from_folder["scores"] == from_csv["scores"] and from_folder["num_examples"] == 8
    capsys.readouterr()
    code = main(["score", *model, "--data", str(tmp_path / "saved"), "--max-length", "16", "--quiet",
                 "--out", str(tmp_path / "x.json")])  # without the column flags
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "has no column 'text'" in err and "'review', 'stars'" in err


def image_dataset(images, from_files: bool):
    """The images of an image folder as a Dataset: encoded bytes (as `save_to_disk` keeps them) or file paths."""
    from PIL import Image

    files = sorted(images.glob("*/*.png"))
    cells = [str(f) for f in files] if from_files else [Image.open(f) for f in files]
    names = sorted({f.parent.name for f in files})
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=names)})
    return datasets.Dataset.from_dict({"image": cells, "label": [names.index(f.parent.name) for f in files]},
                                      features=features), files


@pytest.mark.parametrize("from_files", [False, True])
def test_an_image_dataset_gives_the_pixels_of_the_image_folder(from_files, tmp_path):
    images = write_image_folder(tmp_path / "images")
    dataset, files = image_dataset(images, from_files)
    examples = load_examples(dataset)
    assert examples.kind == "image" and [item.label for item in examples.items] == [f.parent.name for f in files]
    folder = load_examples(images)
    for item, reference in zip(examples.items, folder.items, strict=True):
        assert item.load().tobytes() == reference.load().tobytes()
    model = tiny_vit_dir(tmp_path / "vit")
    on_dataset, on_folder = make_task("image-classification", model, dataset), make_task("image-classification",
                                                                                         model, images)
    by_pixels = {}
    for task in (on_folder, on_dataset):  # the splits differ (by file name, by image content); the pixels do not
        tensors = torch.cat([task.encode(split)["pixel_values"] for split in ("calibration", "validation", "test")])
        by_pixels[task.name] = sorted(tensor.flatten().tolist() for tensor in tensors)
    assert by_pixels[on_dataset.name] == by_pixels[on_folder.name]


def test_the_cli_reads_a_saved_image_dataset(tmp_path, capsys):
    dataset, _ = image_dataset(write_image_folder(tmp_path / "images"), from_files=False)
    dataset.save_to_disk(tmp_path / "saved")
    scores = score_scores(["--task", "image-classification", "--model", str(tiny_vit_dir(tmp_path / "vit")),
                           "--data", str(tmp_path / "saved")], tmp_path, capsys)
    assert scores["num_examples"] == 8 and len(scores["scores"]) == 2
