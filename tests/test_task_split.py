"""The bundled task's data: a deterministic, stratified split; bad data is refused clearly."""

import pytest

from edgeprune.data import LabeledText, SplitRatios, load_text_folder, stratified_split
from edgeprune.errors import UserInputError


def test_bbc_split_is_deterministic_stratified_and_disjoint(bbc_sample):
    first = stratified_split(bbc_sample, SplitRatios(), seed=0)
    again = stratified_split(bbc_sample, SplitRatios(), seed=0)
    other = stratified_split(bbc_sample, SplitRatios(), seed=1)
    assert first == again and first != other
    sources = [{d.source for d in getattr(first, s)} for s in ("calibration", "validation", "test")]
    assert sum(map(len, sources)) == len(bbc_sample) and not (sources[0] & sources[1] | sources[0] & sources[2])
    labels = {d.label for d in bbc_sample}
    assert labels == {"business", "entertainment", "politics", "sports", "tech"}
    for split in (first.calibration, first.validation, first.test):
        assert {d.label for d in split} == labels


def test_full_bbc_test_split_has_at_least_600_documents():
    from edgeprune.data import load_bbc_news

    splits = stratified_split(load_bbc_news(), SplitRatios(), seed=0)
    assert len(splits.test) >= 600 and sum(splits.sizes().values()) == 2225


def test_bad_ratios_and_tiny_labels_are_refused():
    with pytest.raises(UserInputError, match="sum to 1"):
        SplitRatios(0.5, 0.5, 0.5)
    few = [LabeledText("a", "x", "1"), LabeledText("b", "x", "2")]
    with pytest.raises(UserInputError, match="at least 3"):
        stratified_split(few, SplitRatios(), seed=0)


def test_text_folder_errors(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        load_text_folder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserInputError, match=r"empty holds no usable files; expected one sub-folder per label"):
        load_text_folder(tmp_path / "empty")


def test_bbc_news_reads_its_one_windows_1252_article():
    from edgeprune.data import load_bbc_news

    article = next(d for d in load_bbc_news() if d.source == "sports/199.txt")
    assert "a \u00a315.8m signing" in article.text and "\ufffd" not in article.text
