"""JSON Lines in: one object per line, labels of any scalar type, and every bad line refused with its number."""

import json

import pytest

from edgeprune.data import LabeledText, load_examples
from edgeprune.errors import UserInputError


def write_lines(path, *lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_records_blank_lines_scalar_labels_and_empty_texts(tmp_path):
    data = write_lines(tmp_path / "data.jsonl",
                       json.dumps({"text": "  first  ", "label": "a", "id": 1}),
                       "",
                       json.dumps({"text": "second\u2028still second", "label": 2}),
                       json.dumps({"text": "", "label": "a"}),
                       json.dumps({"text": None, "label": "a"}),
                       json.dumps({"text": "third", "label": True}),
                       json.dumps({"text": "fourth", "label": 0.5}))
    examples = load_examples(data)
    assert examples.items == [
        LabeledText("first", "a", "data.jsonl:1"),
        LabeledText("second\u2028still second", "2", "data.jsonl:3"),
        LabeledText("third", "true", "data.jsonl:6"),
        LabeledText("fourth", "0.5", "data.jsonl:7"),
    ]
    assert (examples.kind, examples.labelled, examples.format, examples.skipped) == ("text", True, "jsonl", 2)


def test_ndjson_suffix_named_fields_and_unlabelled(tmp_path):
    data = write_lines(tmp_path / "data.ndjson", '{"body": "x y", "topic": "t1"}', '{"body": "z", "topic": "t2"}')
    examples = load_examples(data, text_column="body", label_column="topic")
    assert [(e.text, e.label) for e in examples.items] == [("x y", "t1"), ("z", "t2")]
    assert examples.format == "jsonl"
    unlabelled = load_examples(data, text_column="body", label_column=None)
    assert [e.label for e in unlabelled.items] == ["", ""] and not unlabelled.labelled


def test_malformed_line_names_its_number(tmp_path):
    data = write_lines(tmp_path / "bad.jsonl", '{"text": "ok", "label": "a"}', "", '{"text": "broken", "label": }')
    with pytest.raises(UserInputError, match=r"bad\.jsonl line 3 is not valid JSON \(Expecting value at column 29\); "
                                             r"each line must be one object"):
        load_examples(data)
    array = write_lines(tmp_path / "array.jsonl", '["text", "label"]')
    with pytest.raises(UserInputError, match=r"array\.jsonl line 1 holds a JSON list, not an object"):
        load_examples(array)


def test_missing_field_lists_the_keys_that_exist(tmp_path):
    data = write_lines(tmp_path / "keys.jsonl", '{"review": "good", "stars": 5}', '{"review": "bad", "id": 7}')
    with pytest.raises(UserInputError, match=r"keys\.jsonl has no column 'text'; its columns are: 'review', 'stars', "
                                             r"'id'; name the text column with --text-column"):
        load_examples(data)
    with pytest.raises(UserInputError, match=r"has no column 'label'; its columns are: 'review', 'stars', 'id'"):
        load_examples(data, text_column="review")
    uneven = write_lines(tmp_path / "uneven.jsonl", '{"text": "a", "label": "x"}', '{"body": "b", "label": "y"}')
    with pytest.raises(UserInputError, match=r"uneven\.jsonl line 2 has no 'text'; its keys are: 'body', 'label'"):
        load_examples(uneven)


def test_record_without_a_label_and_bad_types(tmp_path):
    missing = write_lines(tmp_path / "missing.jsonl", '{"text": "a", "label": "x"}', '{"text": "b"}')
    with pytest.raises(UserInputError, match=r"missing\.jsonl line 2: no label in 'label'; give every line a label"):
        load_examples(missing)
    null = write_lines(tmp_path / "null.jsonl", '{"text": "a", "label": null}')
    with pytest.raises(UserInputError, match=r"null\.jsonl line 1: no label"):
        load_examples(null)
    listed = write_lines(tmp_path / "listed.jsonl", '{"text": "a", "label": ["x", "y"]}')
    with pytest.raises(UserInputError, match=r"listed\.jsonl line 1: a label must be a string or a number, got list"):
        load_examples(listed)
    number = write_lines(tmp_path / "number.jsonl", '{"text": 12, "label": "x"}')
    with pytest.raises(UserInputError, match=r"number\.jsonl line 1: 'text' must be a string, got int 12"):
        load_examples(number)


def test_empty_data_and_not_utf8(tmp_path):
    with pytest.raises(UserInputError, match=r"empty\.jsonl has no records"):
        load_examples(write_lines(tmp_path / "empty.jsonl", "", "  "))
    with pytest.raises(UserInputError, match=r"blank\.jsonl: 'text' is empty in all 2 records"):
        load_examples(write_lines(tmp_path / "blank.jsonl", '{"text": " ", "label": "a"}', '{"text": ""}'))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"text": "ok", "label": "a"}\n{"text": "café", "label": "b"}\n'.encode("latin-1"))
    with pytest.raises(UserInputError, match=r"latin\.jsonl is not UTF-8 text \(byte 0xe9 at line 2\)"):
        load_examples(latin)


def test_a_folder_given_as_jsonl_is_refused(tmp_path):
    with pytest.raises(UserInputError, match=r"the jsonl format reads a file, but .* is a folder"):
        load_examples(tmp_path, format="jsonl")
    with pytest.raises(UserInputError, match=r"unknown data format 'parquet'; choose one of: csv, hf-dataset, "
                                             r"image-folder, jsonl, text-folder"):
        load_examples(tmp_path, format="parquet")
