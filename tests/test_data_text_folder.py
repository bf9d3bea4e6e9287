"""A folder of `<label>/*.txt` files in: sorted, strict UTF-8, and every bad folder refused by name."""

import os

import pytest

from edgeprune.data import LabeledText, detect_format, load_examples, load_text_folder
from edgeprune.errors import UserInputError


def make_folder(root, files):
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def test_labels_from_sub_folders_in_sorted_order(tmp_path):
    folder = make_folder(tmp_path / "reviews", {
        "pos/b.txt": "second positive\n", "pos/a.txt": "\ufefffirst positive", "neg/z.txt": "only negative",
        "neg/empty.txt": "  \n", "neg/notes.md": "not data", "README.txt": "top-level files are not examples",
        ".cache/x.txt": "hidden folders are ignored", "pos/.hidden.txt": "hidden files too",
    })
    examples = load_examples(folder)
    assert examples.items == [
        LabeledText("only negative", "neg", "neg/z.txt"),
        LabeledText("first positive", "pos", "pos/a.txt"),
        LabeledText("second positive", "pos", "pos/b.txt"),
    ]
    assert (examples.kind, examples.labelled, examples.format, examples.skipped) == ("text", True, "text-folder", 1)
    assert detect_format(folder) == "text-folder" and load_text_folder(folder) == examples.items


def test_unlabelled_text_folder(tmp_path):
    folder = make_folder(tmp_path / "corpus", {"part1/a.txt": "alpha", "part2/b.txt": "beta"})
    examples = load_examples(folder, label_column=None)
    assert [(e.text, e.label, e.source) for e in examples.items] == [("alpha", "", "part1/a.txt"),
                                                                       ("beta", "", "part2/b.txt")]
    assert not examples.labelled


def test_missing_folder_and_no_usable_files(tmp_path):
    with pytest.raises(UserInputError, match=r"data path .*absent does not exist"):
        load_examples(tmp_path / "absent")
    empty = make_folder(tmp_path / "flat", {"a.txt": "text right in the folder, not in a label sub-folder"})
    with pytest.raises(UserInputError, match=r"flat holds no usable files; expected one sub-folder per label holding "
                                             r"\.txt files \(text-folder\) or images \(image-folder\)"):
        load_examples(empty)
    with pytest.raises(UserInputError, match=r"flat holds no usable files; expected one sub-folder per label holding "
                                             r"\.txt files, e.g\."):
        load_examples(empty, format="text-folder")


def test_every_file_empty(tmp_path):
    folder = make_folder(tmp_path / "blank", {"a/1.txt": "", "b/2.txt": " \n\t"})
    with pytest.raises(UserInputError, match=r"blank holds 2 \.txt files but every one is empty"):
        load_examples(folder)


def test_not_utf8_and_unreadable_files_are_named(tmp_path):
    folder = make_folder(tmp_path / "latin", {"a/ok.txt": "fine", "b/bad.txt": "line one\n£5".encode("latin-1")})
    with pytest.raises(UserInputError, match=r"text file .*b/bad\.txt is not UTF-8 text \(byte 0xa3 at line 2\)"):
        load_examples(folder)
    dangling = make_folder(tmp_path / "dangling", {"a/ok.txt": "fine"})
    (dangling / "a" / "gone.txt").symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(UserInputError, match=r"cannot read text file .*a/gone\.txt: No such file or directory"):
        load_examples(dangling)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_permission_denied(tmp_path):
    folder = make_folder(tmp_path / "locked", {"a/secret.txt": "x"})
    (folder / "a" / "secret.txt").chmod(0)
    with pytest.raises(UserInputError, match=r"cannot read text file .*secret\.txt: permission denied"):
        load_examples(folder)


def test_mixed_text_and_image_folders_are_refused(tmp_path):
    folder = make_folder(tmp_path / "mixed", {"cats/1.txt": "a cat", "dogs/1.png": b"\x89PNG", "dogs/2.jpg": b""})
    for format in (None, "text-folder", "image-folder"):
        with pytest.raises(UserInputError, match=r"mixed mixes text files and images \(1 \.txt files such as "
                                                 r"cats/1\.txt, 2 images such as dogs/1\.png\); keep one kind"):
            load_examples(folder, format=format)


def test_column_names_do_not_apply_to_folders_and_files_are_not_folders(tmp_path):
    folder = make_folder(tmp_path / "news", {"sport/1.txt": "goal"})
    with pytest.raises(UserInputError, match=r"news is a folder: its labels are its sub-folder names, so a text "
                                             r"column \('body'\)"):
        load_examples(folder, text_column="body")
    with pytest.raises(UserInputError, match=r"the text-folder format reads a folder, but .*1\.txt is a file"):
        load_examples(folder / "sport" / "1.txt", format="text-folder")
