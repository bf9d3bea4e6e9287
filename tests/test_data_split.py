"""The split: seeded, independent of input order, stratified when labelled, settable ratios, and described."""

import json
import random

import pytest

from edgeprune.data import (
    DataSplits,
    Examples,
    LabeledImage,
    LabeledText,
    SplitRatios,
    check_calibration_labels,
    describe_split,
    load_examples,
    random_split,
    split_examples,
    stratified_split,
)
from edgeprune.errors import UserInputError
from edgeprune.serialization import from_jsonable, to_jsonable


def labelled(counts):
    return [LabeledText(f"{label} text {i}", label, f"{label}/{i}") for label, n in counts.items() for i in range(n)]


def as_examples(items, is_labelled=True):
    return Examples(items, "text", is_labelled, "memory", "csv")


def test_stratified_sizes_and_class_balance_are_exact():
    splits = split_examples(as_examples(labelled({"a": 20, "b": 10, "c": 3})), SplitRatios(), seed=0)
    assert describe_split(splits) == {
        "sizes": {"calibration": 18, "validation": 6, "test": 9},
        "total": 33,
        "labelled": True,
        "labels": ["a", "b", "c"],
        "class_balance": {"calibration": {"a": 11, "b": 6, "c": 1},  # 20: 11/3/6, 10: 6/2/2, 3: 1/1/1
                          "validation": {"a": 3, "b": 2, "c": 1},
                          "test": {"a": 6, "b": 2, "c": 1}},
    }
    json.dumps(describe_split(splits))  # saved as-is in the recipe


def test_same_seed_same_split_whatever_the_input_order():
    items = labelled({"a": 40, "b": 25})
    first = stratified_split(items, SplitRatios(), seed=3)
    shuffled = list(items)
    random.Random(0).shuffle(shuffled)
    assert stratified_split(shuffled, SplitRatios(), seed=3) == first
    assert stratified_split(items, SplitRatios(), seed=4) != first
    parts = [{item.source for item in getattr(first, name)} for name in ("calibration", "validation", "test")]
    assert sum(map(len, parts)) == len(items) and set().union(*parts) == {item.source for item in items}
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])


def test_a_reordered_csv_gives_the_same_split(tmp_path):
    rows = [f"review number {i},{'pos' if i % 3 else 'neg'}" for i in range(30)]
    (tmp_path / "a.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    (tmp_path / "b.csv").write_text("text,label\n" + "\n".join(reversed(rows)) + "\n")
    a, b = (split_examples(load_examples(tmp_path / name), seed=7) for name in ("a.csv", "b.csv"))
    for name in ("calibration", "validation", "test"):
        assert [(d.text, d.label) for d in getattr(a, name)] == [(d.text, d.label) for d in getattr(b, name)]


def test_splits_interleave_labels_so_a_prefix_sees_every_label():
    splits = stratified_split(labelled({"a": 50, "b": 50, "c": 50}), SplitRatios(), seed=0)
    assert {item.label for item in splits.calibration[:12]} == {"a", "b", "c"}


def test_settable_ratios():
    splits = split_examples(as_examples(labelled({"a": 50, "b": 30})), SplitRatios(0.8, 0.1, 0.1), seed=0)
    assert describe_split(splits)["class_balance"] == {"calibration": {"a": 40, "b": 24},
                                                       "validation": {"a": 5, "b": 3}, "test": {"a": 5, "b": 3}}
    assert SplitRatios.parse("60,20,20") == SplitRatios(0.6, 0.2, 0.2) == SplitRatios.parse("0.6/0.2/0.2")
    assert from_jsonable(SplitRatios, to_jsonable(SplitRatios(0.7, 0.1, 0.2))) == SplitRatios(0.7, 0.1, 0.2)
    with pytest.raises(UserInputError, match=r"split ratios '0\.7,0\.3' should be three numbers for calibration, "
                                             r"validation and test, such as 0\.55,0\.15,0\.30"):
        SplitRatios.parse("0.7,0.3")
    with pytest.raises(UserInputError, match=r"must be positive and sum to 1, got \(0\.5, 0\.5, 0\.5\)"):
        SplitRatios.parse("0.5,0.5,0.5")
    with pytest.raises(UserInputError, match="should be three numbers"):
        SplitRatios.parse("half,quarter,quarter")


def test_unlabelled_data_splits_by_seeded_shuffle():
    items = [LabeledText(f"sentence {i}", "", f"corpus.txt:{i}") for i in range(100)]
    splits = split_examples(as_examples(items, is_labelled=False), seed=1)
    assert splits.sizes() == {"calibration": 55, "validation": 15, "test": 30}
    assert split_examples(as_examples(items[::-1], is_labelled=False), seed=1) == splits
    assert split_examples(as_examples(items, is_labelled=False), seed=2) != splits
    assert splits.calibration != items[:55]  # shuffled, not cut in file order
    description = describe_split(splits)
    assert description["labelled"] is False and description["labels"] == []
    assert description["class_balance"] == {"calibration": {}, "validation": {}, "test": {}}
    with pytest.raises(UserInputError, match="2 examples cannot be split into calibration, validation and test; "
                                             "give at least 3"):
        split_examples(as_examples(items[:2], is_labelled=False))


def test_images_split_by_their_class_and_file_name():
    images = [LabeledImage(f"/data/{c}/{i}.png", c, f"{c}/{i}.png") for c in ("cat", "dog") for i in range(10)]
    splits = split_examples(Examples(images, "image", True, "/data", "image-folder"), seed=0)
    assert describe_split(splits)["sizes"] == {"calibration": 12, "validation": 4, "test": 4}
    moved = [LabeledImage(f"/elsewhere/{image.source}", image.label, image.source) for image in images]
    again = split_examples(Examples(moved, "image", True, "/elsewhere", "image-folder"), seed=0)
    assert [i.source for i in again.test] == [i.source for i in splits.test]


def test_a_label_with_too_few_examples_is_named():
    with pytest.raises(UserInputError, match=r"label 'rare' has only 2 examples; each label needs at least 3 so that "
                                             r"calibration, validation and test each see it: add examples of 'rare'"):
        stratified_split(labelled({"common": 30, "rare": 2}), SplitRatios(), seed=0)


def test_a_label_never_in_calibration_is_refused():
    a, b, c = (LabeledText(t, label, t) for t, label in (("x", "a"), ("y", "b"), ("z", "c")))
    check_calibration_labels(DataSplits([a, b], [a], [b]))
    with pytest.raises(UserInputError, match=r"label 'c' appears only in the test split \(1 example\), never in "
                                             r"calibration, .* add examples of 'c' or give calibration a larger share"):
        check_calibration_labels(DataSplits([a], [a], [a, c]))
    with pytest.raises(UserInputError, match=r"label 'c' appears only in the validation and test splits \(2 "):
        check_calibration_labels(DataSplits([a], [c], [c]))
    with pytest.raises(UserInputError, match=r"label 'b' appears only in the validation split"):
        check_calibration_labels(DataSplits([a], [b], [a]))


@pytest.mark.parametrize("seed", range(5))
def test_a_duplicated_document_never_lands_in_two_splits(seed):
    texts = [f"article {i}" for i in range(20)] + ["the same wire story"] * 6
    documents = [LabeledText(text, "news", f"{i}.txt") for i, text in enumerate(texts)]
    for splits in (stratified_split(documents, SplitRatios(), seed), random_split(documents, SplitRatios(), seed)):
        seen = [{d.text for d in getattr(splits, name)} for name in ("calibration", "validation", "test")]
        assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
        assert all(splits.sizes().values()) and sum(splits.sizes().values()) == len(documents)
