"""CSV and TSV files in: columns by name, any common delimiter, and every bad file refused with its line."""

import os

import pytest

from edgeprune.data import LabeledText, load_examples
from edgeprune.errors import UserInputError


def write(path, text, encoding="utf-8"):
    path.write_bytes(text.encode(encoding))
    return path


def test_rows_quoting_bom_blank_and_empty_rows(tmp_path):
    data = write(tmp_path / "reviews.csv",
                 '\ufeffid,text,label\n'
                 '1,"Great, really great",pos\n'
                 '2,"two\nlines with ""quotes""",neg\n'
                 '\n'
                 '3,  ,pos\n'
                 '4,  spaced out  , 7 \n')
    examples = load_examples(data)
    assert examples.items == [
        LabeledText("Great, really great", "pos", "reviews.csv:2"),
        LabeledText('two\nlines with "quotes"', "neg", "reviews.csv:3"),
        LabeledText("spaced out", "7", "reviews.csv:7"),
    ]
    assert (examples.kind, examples.labelled, examples.format, examples.source) == ("text", True, "csv", str(data))
    assert examples.skipped == 1 and len(examples) == 3 and examples.labels == ["7", "neg", "pos"]


@pytest.mark.parametrize(("name", "content"), [
    ("semicolon.csv", "label;text\nx;a, b, c\ny;\"d; e\"\n"),
    ("pipe.csv", "label|text\nx|a, b, c\ny|d; e\n"),
    ("tabs.tsv", "label\ttext\nx\ta, b, c\ny\td; e\n"),
])
def test_delimiter_comes_from_the_header_or_the_suffix(tmp_path, name, content):
    examples = load_examples(write(tmp_path / name, content))
    assert [(e.text, e.label) for e in examples.items] == [("a, b, c", "x"), ("d; e", "y")]


def test_single_column_file_keeps_commas_in_unquoted_text(tmp_path):
    examples = load_examples(write(tmp_path / "corpus.csv", "text\nhello, world\none; two | three\n"),
                             label_column=None)
    assert [e.text for e in examples.items] == ["hello, world", "one; two | three"]
    assert not examples.labelled and examples.labels == [] and {e.label for e in examples.items} == {""}


def test_named_columns_and_unlabelled_data(tmp_path):
    data = write(tmp_path / "news.csv", "topic,body,extra\nsport,Goal!,1\ntech,New chip,2\n")
    examples = load_examples(data, text_column="body", label_column="topic")
    assert [(e.text, e.label) for e in examples.items] == [("Goal!", "sport"), ("New chip", "tech")]
    unlabelled = load_examples(data, text_column="body", label_column=None)
    assert [(e.text, e.label) for e in unlabelled.items] == [("Goal!", ""), ("New chip", "")]


def test_long_fields_beyond_the_csv_module_default_limit(tmp_path):
    import csv

    long_text = "word " * 60_000  # 300,000 characters; the csv module refuses fields over 131,072 by default
    examples = load_examples(write(tmp_path / "long.csv", f'text,label\n"{long_text}",x\n'))
    assert len(examples.items[0].text) == len(long_text.strip()) and csv.field_size_limit() == 131_072


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(UserInputError, match=r"data path .*nope\.csv does not exist"):
        load_examples(tmp_path / "nope.csv")
    with pytest.raises(UserInputError, match=r"cannot tell the format .*'\.xlsx'.*\.csv, \.jsonl, \.ndjson, \.tsv"):
        load_examples(write(tmp_path / "sheet.xlsx", "text,label\na,b\n"))
    assert len(load_examples(tmp_path / "sheet.xlsx", format="csv")) == 1


def test_not_utf8_names_the_file_and_line(tmp_path):
    data = write(tmp_path / "latin.csv", "text,label\nplain,x\nprice £5,y\n", encoding="latin-1")
    with pytest.raises(UserInputError, match=r"latin\.csv is not UTF-8 text \(byte 0xa3 at line 3\); save it as UTF-8"):
        load_examples(data)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file(tmp_path):
    data = write(tmp_path / "locked.csv", "text,label\na,b\n")
    data.chmod(0)
    with pytest.raises(UserInputError, match=r"cannot read CSV file .*locked\.csv: permission denied"):
        load_examples(data)


def test_missing_columns_list_the_columns_that_exist(tmp_path):
    data = write(tmp_path / "reviews.csv", "review,stars\ngood,5\n")
    with pytest.raises(UserInputError, match=r"reviews\.csv has no column 'text'; its columns are: 'review', "
                                             r"'stars'; name the text column with --text-column"):
        load_examples(data)
    with pytest.raises(UserInputError, match=r"has no column 'label'; its columns are: 'review', 'stars'; name the "
                                             r"label column with --label-column \(unlabelled data"):
        load_examples(data, text_column="review")
    with pytest.raises(UserInputError, match="both 'review'"):
        load_examples(data, text_column="review", label_column="review")


def test_empty_data(tmp_path):
    with pytest.raises(UserInputError, match=r"empty\.csv is empty; it needs a header row"):
        load_examples(write(tmp_path / "empty.csv", "\n\n"))
    with pytest.raises(UserInputError, match=r"header\.csv has a header but no rows"):
        load_examples(write(tmp_path / "header.csv", "text,label\n\n"))
    with pytest.raises(UserInputError, match=r"blank\.csv: column 'text' is empty in all 2 rows"):
        load_examples(write(tmp_path / "blank.csv", "text,label\n ,x\n,y\n"))


def test_row_without_a_label_names_its_line(tmp_path):
    data = write(tmp_path / "gaps.csv", 'text,label\n"one\ntwo",x\nthree,\nfour,y\n')
    with pytest.raises(UserInputError, match=r"gaps\.csv line 4: no label in column 'label'; give every row a label"):
        load_examples(data)
    short = write(tmp_path / "short.csv", "text,label\nalone\n")
    with pytest.raises(UserInputError, match=r"short\.csv line 2: no label"):
        load_examples(short)


def test_broken_quoting_names_the_line_where_the_record_starts(tmp_path):
    unclosed = write(tmp_path / "unclosed.csv", 'text,label\nfine,x\n"never closed,y\nmore,z\n')
    with pytest.raises(UserInputError, match=r"unclosed\.csv line 3 cannot be parsed \(unexpected end of data\)"):
        load_examples(unclosed)
    stray = write(tmp_path / "stray.csv", 'text,label\n"quoted"then,y\n')
    with pytest.raises(UserInputError, match=r"stray\.csv line 2 cannot be parsed"):
        load_examples(stray)
