"""Malformed inputs through the CLI: each case ends in its documented exit code, one line on stderr (captured at the
file descriptor), no traceback, nothing created or removed at the output; all fail before any weights load."""

import io
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import edgeprune.cli
import edgeprune.cli.pruning  # the verb patched below (the CLI imports it lazily)
from edgeprune.cli import main
from edgeprune.cli.common import positive_mb
from edgeprune.errors import EdgepruneError
from edgeprune.export import export  # imported here: its import-time noise must not count as a case's output
from tests.test_device_profiles import GOOD as GOOD_PROFILE

# --- what the cases are made of -------------------------------------------------------------------------------

PROFILE = GOOD_PROFILE.lstrip()  # the valid profile of test_device_profiles, which every case below breaks
SSH = PROFILE.replace('kind = "local"', 'kind = "ssh"\nhost = "pi5.local"\nuser = "pi"')
ADB = PROFILE.replace('kind = "local"', 'kind = "adb"\nserial = "R5CX"')
HARDWARE = '[hardware]\narch = "aarch64"\ncores = 4\nram_mb = 4096\n'
RUNTIME = '[runtime]\nname = "executorch"\nthreads = 4\n'
BERT_ROWS = "".join(json.dumps({"text": f"the {word} of day {i}", "label": label}) + "\n"
                    for label, word in (("sport", "match"), ("money", "bank"), ("music", "song")) for i in range(6))


def profile_cases() -> list[tuple[str, bytes, str]]:
    edits = [  # (name, profile, old, new, expected)
        ("syntax", PROFILE, 'name = "board"', 'name = "board', "is not valid TOML"),
        ("hardware = 5", PROFILE, HARDWARE, "", "hardware = 5 must be a table"),
        ("array of budgets", PROFILE, "[budgets]", "[[budgets]]", "budgets = [{'max_mb': 25}] must be a table"),
        ("no runtime", PROFILE, RUNTIME, "", "missing table [runtime]"),
        ("no name", PROFILE, 'name = "board"\n', "", "missing name"),
        ("unknown key", PROFILE, "cores = 4", "cores = 4\nfrequency = 2", "unknown key 'hardware.frequency'"),
        ("unknown table", PROFILE, "[budgets]", "[extras]\na = 1\n[budgets]", "unknown table [extras]"),
        ("cores string", PROFILE, "cores = 4", 'cores = "4"', "hardware.cores = '4' has the wrong type"),
        ("cores float", PROFILE, "cores = 4", "cores = 4.5", "hardware.cores = 4.5 has the wrong type"),
        ("cores bool", PROFILE, "cores = 4", "cores = true", "hardware.cores = True has the wrong type"),
        ("ram huge", PROFILE, "ram_mb = 4096", "ram_mb = 99999999999999999999", "hardware.ram_mb = a number of more"),
        *[(f"max_mb {v}", PROFILE, "max_mb = 25", f"max_mb = {v}", f"budgets.max_mb = {m}")
          for v, m in (("nan", "nan must be a finite"), ("inf", "inf must be a finite"), ("-inf", "-inf must be"),
                       ("-0.0", "-0.0 must be positive"), ("0", "0 must be positive"), ("1e300", "1e+300 is out"))],
        ("latency nan", PROFILE, "max_mb = 25", "max_latency_ms = nan", "budgets.max_latency_ms = nan"),
        ("idle nan", PROFILE, "[conn", "[power]\nidle_w = nan\nactive_w = 5\n[conn", "power.idle_w = nan"),
        ("active inf", PROFILE, "[conn", "[power]\nidle_w = 1\nactive_w = inf\n[conn", "power.active_w = inf"),
        ("port high", SSH, 'user = "pi"', 'user = "pi"\nport = 70000', "connection.port = 70000 is out of range"),
        ("port zero", SSH, 'user = "pi"', 'user = "pi"\nport = 0', "connection.port = 0 must be positive"),
        ("adb port high", ADB, 'serial = "R5CX"', 'serial = "R5CX"\nadb_port = 65536', "connection.adb_port = 65536"),
        ("timeout nan", SSH, 'user = "pi"', 'user = "pi"\nconnect_timeout_s = nan', "connect_timeout_s = nan"),
        ("host with ;", SSH, "pi5.local", "127.0.0.1;x", "host '127.0.0.1;x' is not a host name"),
        ("host as option", SSH, "pi5.local", "-oProxyCommand=x", "host '-oProxyCommand=x' is not"),
        ("user as option", SSH, 'user = "pi"', 'user = "-oProxyCommand=x"', "user '-oProxyCommand=x' is not"),
        ("serial as option", ADB, 'serial = "R5CX"', 'serial = "-s"', "'-s' is not an adb serial"),
        ("name as path", PROFILE, 'name = "board"', 'name = "../x"', "name = '../x' must be a short name"),
        ("clusters = 5", PROFILE, "ram_mb = 4096", "ram_mb = 4096\nclusters = 5", "hardware.clusters = 5 has the"),
        ("cluster not table", PROFILE, "ram_mb = 4096", "ram_mb = 4096\nclusters = [1]", "clusters[0] must be a"),
    ]
    cases = [(name, (f"hardware = 5\n{base}" if name == "hardware = 5" else base).replace(old, new, 1).encode(),
              expected) for name, base, old, new, expected in edits]
    return [*cases, ("empty", b"", "missing name, description"),
            ("not utf-8", PROFILE.encode().replace(b"test", b"t\xffst"), "not UTF-8 text (byte 0xff at line 2)")]


def project_file_cases() -> list[tuple[str, bytes | None, str]]:
    return [
        ("syntax", b"max_mb = = 3", "is not valid TOML"), ("not utf-8", b'model = "\xff"', "is not UTF-8"),
        ("unknown key", b'colour = "red"', "unknown key 'colour'"), ("unknown table", b"[nope]\na = 1", "[nope]"),
        ("unknown option", b"[fit]\ncolour = 1", "fit.colour is not an option"),
        ("nan", b"[fit]\nmax_mb = nan", "fit.max_mb"), ("inf", b"max_mb = inf", "max_mb = inf"),
        ("-0", b"max_mb = -0.0", "max_mb = -0.0"), ("string", b'max_mb = "abc"', "max_mb = 'abc'"),
        ("list", b"max_mb = [1, 2]", "must be a single value"), ("table", b"[fit]\nmax_mb = {a = 1}", "single"),
        ("min quality nan", b"[fit]\nmin_quality = nan", "fit.min_quality"),
        ("min quality text nan", b'min_quality = "nan"', "min_quality"),
        ("tolerance inf", b"[fit]\nquality_tolerance = inf", "fit.quality_tolerance"),
        ("seed float", b"seed = 1.5", "seed = 1.5"), ("json text", b'[fit]\njson = "yes"', "must be true or false"),
        ("split nan", b'split = "nan,0.5,0.5"', "split"), ("ffn nan", b'[fit]\nffn_fractions = "nan"', "ffn_fr"),
        ("percentile", b"[fit]\nlatency_percentile = 95", "is not one of"),
        ("thousands of digits", b"seed = 1" + b"0" * 5000, "is not valid TOML"), ("a folder", None, "is not a file"),
    ]


def png() -> bytes:
    from PIL import Image
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buffer, format="PNG")
    return buffer.getvalue()


def data_cases() -> list[tuple[str, dict[str, bytes], str, str]]:  # (name, files, --data and options, expected)
    rows = "text,label\n" + "".join(f"a {word} {i},{label}\n" for label, word in (("a", "x"), ("b", "y"))
                                    for i in range(4))
    return [
        ("csv latin-1", {"d.csv": (rows + "café,a\n").encode("latin-1")}, "d.csv", "not UTF-8"),
        ("jsonl utf-16", {"d.jsonl": BERT_ROWS.encode("utf-16")}, "d.jsonl", "not UTF-8"),
        ("jsonl broken line", {"d.jsonl": (BERT_ROWS + '{"text": "x", "label": \n').encode()}, "d.jsonl",
         "line 19 is not valid JSON"),
        ("jsonl list", {"d.jsonl": b"[1, 2]\n"}, "d.jsonl", "holds a JSON list, not an object"),
        ("jsonl text number", {"d.jsonl": b'{"text": 5, "label": "a"}\n'}, "d.jsonl", "'text' must be a string"),
        ("csv open quote", {"d.csv": (rows + '"never closed,a\n').encode()}, "d.csv", "cannot be parsed"),
        ("csv NUL", {"d.csv": b"text,label\nab\x00c,a\n"}, "d.csv", ""),
        ("csv empty", {"d.csv": b""}, "d.csv", "is empty"),
        ("csv header", {"d.csv": b"text,label\n"}, "d.csv", "no rows"),
        ("csv no column", {"d.csv": b"body,label\nx,a\n"}, "d.csv", "has no column 'text'"),
        ("csv no label", {"d.csv": (rows + "x,\n").encode()}, "d.csv", "no label in column 'label'"),
        ("csv empty texts", {"d.csv": b"text,label\n ,a\n ,b\n"}, "d.csv", "is empty in all 2 rows"),
        ("one per label", {"d.csv": b"text,label\nx,a\ny,b\nz,c\n"}, "d.csv", "has only 1 example;"),
        ("two per label", {"d.csv": b"text,label\nx,a\nv,a\ny,b\nw,b\n"}, "d.csv", "has only 2 examples"),
        ("missing", {}, "nope.csv", "does not exist"), ("unknown suffix", {"d.xml": b"<x/>"}, "d.xml", "suffix"),
        ("folder not utf-8", {"f/a/1.txt": b"\xff\xfe", "f/b/1.txt": b"hi"}, "f", "not UTF-8"),
        ("folder mixed", {"f/a/1.txt": b"hi", "f/b/1.png": png()}, "f", "mixes text files and images"),
        ("folder no files", {"f/a/1.doc": b"x"}, "f", "holds no usable files"),
        ("folder empty texts", {"f/a/1.txt": b" ", "f/b/1.txt": b""}, "f", "every one is empty"),
        ("images for text", {f"f/{c}/{i}.png": png() for c in "abc" for i in range(3)}, "f", "needs text data"),
        *[(f"folder with {flags}", {"f/a/1.txt": b"hi"}, f"f {flags}", expected) for flags, expected in (
            ("--data-format csv", "reads a file"), ("--data-format tsv", "'tsv' is not one of"),
            ("--text-column body", "column names are for CSV and JSONL files"))],
    ]


def model_cases(root: Path, bert: Path) -> dict[str, Path]:
    """Copies of the tiny BERT with one file broken (the rest linked), config-only Llama and ViT folders, data."""
    from transformers import LlamaConfig, ViTConfig

    def broken(name: str, file: str, content: bytes | None) -> None:
        folder = root / name
        folder.mkdir()
        for source in bert.iterdir():
            if source.name != file:
                (folder / source.name).symlink_to(source)
        if content is not None:
            (folder / file).write_bytes(content)

    weights = (bert / "model.safetensors").read_bytes()
    for name, file, content in [
            ("config-not-json", "config.json", b"not json"), ("config-not-utf8", "config.json", b'{"a": "\xff"}'),
            ("config-a-list", "config.json", b"[]"), ("config-no-model-type", "config.json", b"{}"),
            ("config-unknown-type", "config.json", b'{"model_type": "no-such-model"}'),
            ("weights-garbage", "model.safetensors", b"\x00" * 8 + b"garbage"),
            ("weights-cut", "model.safetensors", weights[:len(weights) // 2]),
            ("weights-empty", "model.safetensors", b""),
            ("tokenizer-garbage", "tokenizer.json", b"{not json"), ("tokenizer-missing", "tokenizer.json", None)]:
        broken(name, file, content)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        (root / "tokenizer-missing" / name).unlink(missing_ok=True)
    broken("bin-cut", "model.safetensors", None)
    (root / "bin-cut" / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + b"\x00" * 60)
    LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                architectures=["LlamaForCausalLM"]).save_pretrained(root / "llama")
    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
              image_size=16, patch_size=4, architectures=["ViTModel"]).save_pretrained(root / "vit")
    (root / "data.jsonl").write_text(BERT_ROWS)
    for colour in ("red", "green", "blue"):
        (root / "images" / colour).mkdir(parents=True)
        for i in range(3):
            (root / "images" / colour / f"{i}.png").write_bytes(png())
    return {"bert": bert, "data": root / "data.jsonl", "images": root / "images",
            **{p.name: p for p in root.iterdir() if p.is_dir() and p.name != "images"}}


def artifact_cases(root: Path) -> Path:
    """A real ExecuTorch program and LiteRT model of one linear layer, and broken copies of them."""
    module, inputs = torch.nn.Linear(8, 4).eval(), (torch.randn(1, 8),)
    programs = {suffix: export(module, inputs, root / f"good{suffix}", recipe).path.read_bytes()
                for suffix, recipe in ((".pte", "fp32"), (".tflite", "litert-fp32"))}
    for suffix, data in programs.items():
        (root / f"empty{suffix}").write_bytes(b"")
        (root / f"text{suffix}").write_bytes(b"hello, I am a text file\n")
        (root / f"cut{suffix}").write_bytes(data[:len(data) // 2])
    (root / "header.pte").write_bytes(programs[".pte"][:40])
    (root / "folder.pte").mkdir()
    (root / "model.onnx").write_bytes(b"onnx")
    return root


BUDGET_FLAGS = ("--max-mb", "--max-memory-mb", "--max-latency-ms", "--max-energy-mj")
BAD_NUMBERS = ("nan", "inf", "-inf", "-0", "0", "1e400", "1e-400", "", "abc", "NaN%")
TASK = ["--max-length", "16", "--quiet"]


def snapshot(root: Path) -> dict[str, int]:
    """Every path under `root` with its size (folders -1); the isolated cache is not an output."""
    return {str(p.relative_to(root)): (p.stat().st_size if p.is_file() else -1) for p in sorted(root.rglob("*"))
            if p.relative_to(root).parts[0] != "cache"}


def run(capfd, argv: list[str]) -> tuple[int, str, str]:
    capfd.readouterr()
    code = main(argv)
    return code, *capfd.readouterr()


def assert_one_line(code: int, err: str, expected_code: int, expected: str = "") -> None:
    assert code == expected_code, f"exit {code}, expected {expected_code}: {err}"
    assert err.count("\n") == 1 and err.endswith("\n") and err.startswith("edgeprune: "), repr(err)
    assert "Traceback" not in err and expected in err, err


def check_case(capfd, root: Path, argv: list[str], expected_code: int, expected: str = "") -> None:
    before = snapshot(root)
    code, _, err = run(capfd, argv)
    assert_one_line(code, err, expected_code, expected)
    assert snapshot(root) == before, "the case created or removed files"


def inputs(tmp_path: Path) -> dict[str, Path]:
    """Good data and head scores, and a file named like an artifact, for cases about something else."""
    (tmp_path / "d.jsonl").write_text(BERT_ROWS)
    (tmp_path / "scores.json").write_text(json.dumps({"criterion": "taylor", "num_examples": 1,
                                                      "scores": [[1.0, 2.0, 3.0, 4.0]] * 3}))
    (tmp_path / "m.pte").write_bytes(b"not a program")
    return {"data": tmp_path / "d.jsonl", "scores": tmp_path / "scores.json", "artifact": tmp_path / "m.pte"}


# --- numbers from flags ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", BUDGET_FLAGS)
@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_every_budget_flag_refuses_what_is_not_a_positive_finite_number(flag, value, tmp_path, capfd):
    check_case(capfd, tmp_path, ["fit", f"{flag}={value}", "--out", str(tmp_path / "o")], 2)


@pytest.mark.parametrize(("flag", "value"), [
    *[("--min-quality", v) for v in ("nan", "inf", "-inf", "1e400", "", "abc", "nan%", "-inf%", "5%", "-1e400%")],
    *[("--quality-tolerance", v) for v in ("nan", "inf", "1e400", "", "abc", "-1")],
    *[("--ffn-fractions", v) for v in ("nan", "0,inf", "0,x")],
    *[("--layer-removals", v) for v in ("1e400", "one", "0.5")],
    *[("--split", v) for v in ("nan,0.5,0.5", "inf,0,0", "0.5,0.5", "", "-1,1,1")],
    *[("--seed", v) for v in ("1e400", "nan")],
    *[("--max-length", v) for v in ("nan", "1e400", "-5", "100")],
    ("--latency-percentile", "95"), ("--scoring-examples", "0"), ("--recover-steps", "-1"), ("--recover-steps", "many"),
    ("--recover-precision", "half"),
])
def test_other_fit_numbers_are_checked(flag, value, tiny_bert_dir, tmp_path, capfd):
    data = inputs(tmp_path)["data"]
    check_case(capfd, tmp_path, ["fit", "--model", str(tiny_bert_dir), "--data", str(data), *TASK,
                                 f"{flag}={value}", "--out", str(tmp_path / "o")], 2)


@pytest.mark.parametrize("value", ["nan", "inf", "-0", "0", "1e400", "", "abc", "-5"])
def test_bench_timeout_must_be_a_positive_finite_number(value, tmp_path, capfd):
    check_case(capfd, tmp_path, ["bench", str(inputs(tmp_path)["artifact"]), f"--timeout-s={value}", "--quiet"], 2)


@pytest.mark.parametrize(("verb", "flags"), [
    ("prune", ["--remove", "-3"]), ("prune", ["--quantile", "nan"]), ("prune", ["--threshold", "inf"]),
    ("distill", ["--learning-rate", "nan"]), ("distill", ["--ffn-ratio", "inf"]), ("distill", ["--max-steps", "x"]),
    ("distill", ["--precision", "fp8"]),
    ("score", ["--examples", "0"]), ("bench", ["--runs", "0"]), ("bench", ["--threads", "-1"]),
])
def test_numbers_of_the_other_verbs_are_checked(verb, flags, tiny_bert_dir, tmp_path, capfd):
    given_ = inputs(tmp_path)
    common = {"prune": ["--model", str(tiny_bert_dir), "--scores", str(given_["scores"]), "--out", str(tmp_path / "o")],
              "distill": ["--model", str(tiny_bert_dir), "--out", str(tmp_path / "o"), "--quiet"],
              "score": ["--out", str(tmp_path / "s.json"), "--quiet"], "bench": [str(given_["artifact"]), "--quiet"]}
    check_case(capfd, tmp_path, [verb, *common[verb], *flags], 2)


@pytest.mark.parametrize("content", [b'{"scores": [[NaN]]}', b"[1]", b"\xff\xfe", b"{", b'{"scores": "x"}', b""])
def test_a_bad_json_input_is_one_line(content, tiny_bert_dir, tmp_path, capfd):
    (tmp_path / "bad.json").write_bytes(content)
    check_case(capfd, tmp_path, ["prune", "--model", str(tiny_bert_dir), "--scores", str(tmp_path / "bad.json"),
                                 "--remove", "2", "--out", str(tmp_path / "o")], 2, "bad.json")


@given(text=st.text(max_size=12))
@settings(max_examples=150, deadline=None, database=None)
def test_a_budget_is_finite_and_positive_or_refused(text):
    try:
        value = positive_mb.convert(text, None, None)
    except click.BadParameter as error:
        assert "\n" not in error.format_message()
        return
    assert math.isfinite(value) and value > 0


# --- device profiles ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "content", "expected"), profile_cases())
def test_a_bad_device_profile_is_named_with_its_key(name, content, expected, tmp_path, capfd):
    path = tmp_path / "board.toml"
    path.write_bytes(content)
    check_case(capfd, tmp_path, ["devices", "show", str(path)], 2, expected)


def test_devices_list_names_the_broken_profile_and_lists_the_others(tmp_path, capfd, monkeypatch):
    (tmp_path / "good.toml").write_text(PROFILE.replace('name = "board"', 'name = "good"'))
    (tmp_path / "broken.toml").write_bytes(PROFILE.encode().replace(b"a test board", b"a \xff board"))
    monkeypatch.setenv("EDGEPRUNE_DEVICES", str(tmp_path))
    code, out, err = run(capfd, ["devices", "list"])
    assert_one_line(code, err, 2, "broken.toml")
    assert "not UTF-8" in err and out.startswith("host\t") and "\ngood\texecutorch\tlocal\ta test board\n" in out


@given(content=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
@settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_bytes_as_a_profile_load_or_fail_in_one_line(content, tmp_path, capfd):
    path = tmp_path / "fuzz.toml"
    path.write_bytes(content)
    code, _, err = run(capfd, ["devices", "show", str(path)])
    if code != 0:
        assert_one_line(code, err, 2)


# --- the project file -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "content", "expected"), project_file_cases())
def test_a_bad_project_file_is_named_with_its_key(name, content, expected, tmp_path, capfd, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    if content is None:
        (work / "edgeprune.toml").mkdir()
    else:
        (work / "edgeprune.toml").write_bytes(content)
    check_case(capfd, tmp_path, ["fit", "--out", str(tmp_path / "o")], 2, expected)


@pytest.mark.parametrize("target", ["missing.toml", "."])
def test_config_must_name_a_file(target, tmp_path, capfd):
    check_case(capfd, tmp_path, ["fit", "--config", str(tmp_path / target), "--out", str(tmp_path / "o")], 2, "TOML")


# --- model folders, data and task kinds -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_bert_dir) -> dict[str, Path]:
    return model_cases(tmp_path_factory.mktemp("malformed-models"), tiny_bert_dir)


@pytest.mark.parametrize(("name", "task", "expected"), [
    ("config-not-json", "classification", "cannot read the model config"),
    ("config-not-utf8", "classification", "cannot read the model config"),
    ("config-a-list", "classification", "cannot read the model config"),
    ("config-no-model-type", "classification", "cannot read the model config"),
    ("config-unknown-type", "classification", "cannot read the model config"),
    ("weights-garbage", "classification", "is not a safetensors file"),
    ("weights-cut", "classification", "is cut off"),
    ("weights-empty", "classification", "is not a safetensors file (0 bytes)"),
    ("bin-cut", "classification", "is cut off"),
    ("tokenizer-garbage", "classification", "cannot load a tokenizer"),
    ("tokenizer-missing", "embedding", "tokenizer"),
    ("bert", "causal-lm", "task causal-lm needs a decoder"),
    ("bert", "image-classification", "task image-classification needs a vision model"),
    ("llama", "embedding", "but {path} holds a decoder (LlamaForCausalLM); with this model use --task causal-lm"),
    ("llama", "classification", "task classification needs a text encoder"),
    ("vit", "classification", "holds a vision model (ViTModel)"),
    ("vit", "causal-lm", "holds a vision model"),
])
def test_a_broken_or_mismatched_model_folder_fails_before_any_weights_load(name, task, expected, models, tmp_path,
                                                                           capfd):
    data = models["images"] if task == "image-classification" else models["data"]
    expected = expected.format(path=models[name])
    check_case(capfd, tmp_path, ["score", "--task", task, "--model", str(models[name]), "--data", str(data), *TASK,
                                 "--out", str(tmp_path / "o" / "s.json")], 2, expected)


@pytest.mark.parametrize("name", ["config-not-json", "weights-cut", "weights-garbage"])
@pytest.mark.parametrize("verb", ["prune", "distill"])
def test_prune_and_distill_check_the_model_folder_first(verb, name, models, tmp_path, capfd):
    extra = ["--scores", str(inputs(tmp_path)["scores"]), "--remove", "2"] if verb == "prune" else ["--quiet"]
    check_case(capfd, tmp_path, [verb, "--model", str(models[name]), *extra, "--out", str(tmp_path / "o")], 2)


@pytest.mark.parametrize(("name", "files", "target", "expected"), data_cases())
def test_bad_data_is_one_line_before_any_model_work(name, files, target, expected, tiny_bert_dir, tmp_path, capfd):
    for relative, content in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(content)
    target, *flags = target.split()  # the path given to --data, and the data options that go with it
    check_case(capfd, tmp_path, ["score", "--model", str(tiny_bert_dir), "--data", str(tmp_path / target), *flags,
                                 *TASK, "--out", str(tmp_path / "o" / "s.json")], 2, expected)


def test_an_image_that_does_not_decode(models, tmp_path, capfd):
    images = tmp_path / "images"
    shutil.copytree(models["images"], images)
    (images / "red" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n but not really")
    check_case(capfd, tmp_path, ["score", "--task", "image-classification", "--model", str(models["vit"]),
                                 "--data", str(images), *TASK, "--out", str(tmp_path / "s.json")], 2, "broken.png")


# --- artifacts ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    return artifact_cases(tmp_path_factory.mktemp("malformed-artifacts"))


@pytest.mark.parametrize(("name", "flags", "code", "expected"), [
    ("empty.pte", [], 4, "is empty, not an ExecuTorch program"), ("cut.pte", [], 4, "is cut off"),
    ("text.pte", [], 4, "is not an ExecuTorch program (it starts with b'hello"), ("header.pte", [], 4, "is cut off"),
    ("empty.tflite", [], 4, "is empty, not a LiteRT model"), ("text.tflite", [], 4, "is not a LiteRT model"),
    ("cut.tflite", [], 4, "is not a LiteRT model in one piece"),
    ("good.tflite", ["--runtime", "executorch"], 4, "it is a LiteRT model: pass --runtime litert"),
    ("good.pte", ["--runtime", "litert"], 4, "it is an ExecuTorch program: pass --runtime executorch"),
    ("folder.pte", [], 2, "is a folder"), ("model.onnx", [], 2, "cannot tell the runtime"),
    ("missing.pte", [], 2, "does not exist"),
])
def test_a_bad_artifact_is_refused_before_it_runs(name, flags, code, expected, artifacts, tmp_path, capfd):
    check_case(capfd, artifacts, ["bench", str(artifacts / name), *flags, "--out", str(tmp_path / "reports"),
                                  "--quiet"], code, expected)
    assert not (tmp_path / "reports").exists()


def test_the_command_itself_prints_one_line_for_a_text_file_named_model_pte(tmp_path):
    (tmp_path / "model.pte").write_text("hello\n")
    done = subprocess.run([sys.executable, "-c", "from edgeprune.cli import main; raise SystemExit(main())",
                           "bench", "model.pte", "--quiet"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert_one_line(done.returncode, done.stderr, 4, "model.pte is not an ExecuTorch program")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte"]


# --- output paths ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("verb", "out", "expected"), [
    ("score", "folder", "is a folder"), ("score", "file.txt/s.json", "is a file, not a folder"),
    ("score", "/proc/edgeprune-x/s.json", "cannot be written"), ("quantize", "/proc/x/q.pt2", "cannot be written"),
    ("quantize", "folder.pt2", "is a folder"), ("export", "/proc/x/m.pte", "cannot be written"),
    ("export", "file.txt/m.pte", "is a file"), ("prune", "full", "not empty"), ("prune", "file.txt", "is a file"),
    ("prune", "/proc/x/o", "cannot be written"), ("distill", "full", "not empty"), ("distill", "file.txt", "is a"),
    ("distill", "/proc/x/o", "cannot be written"), ("bench", "file.txt", "is a file"),
    ("bench", "/proc/x/o", "cannot be written"), ("fit", "full", "not empty"), ("fit", "file.txt", "is a file"),
    ("fit", "/proc/x/o", "cannot be written"), ("fit", "file.txt/o", "cannot be created"),
])
def test_an_output_that_cannot_be_written_is_refused_and_left_alone(verb, out, expected, tiny_bert_dir, tmp_path,
                                                                    capfd):
    for folder in ("folder", "folder.pt2", "full"):
        (tmp_path / folder).mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    (tmp_path / "file.txt").write_text("mine")
    given_ = inputs(tmp_path)
    task = ["--model", str(tiny_bert_dir), "--data", str(given_["data"]), *TASK]
    argv = {"score": ["score", *task], "quantize": ["quantize", *task], "export": ["export", *task],
            "prune": ["prune", "--model", str(tiny_bert_dir), "--scores", str(given_["scores"]), "--remove", "2"],
            "distill": ["distill", "--model", str(tiny_bert_dir), "--quiet"], "fit": ["fit", "--max-mb", "30", *task],
            "bench": ["bench", str(given_["artifact"])]}[verb]
    check_case(capfd, tmp_path, [*argv, "--out", out if out.startswith("/") else str(tmp_path / out)], 2, expected)


# --- connections ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [
    ["--ssh", "root@127.0.0.1;x"], ["--ssh", "root@-oProxyCommand=x"], ["--ssh", "-oProxyCommand=x@host"],
    ["--ssh", "pi@host:70000"], ["--ssh", "pi@host:0"], ["--ssh", "pi@ho st"], ["--ssh", "pi@"], ["--ssh", "@host"],
    ["--ssh", "pi@host$(reboot)"], ["--ssh", "pi@[::1;x]:22"], ["--ssh", "pi@host\n"], ["--adb", "-x"],
    ["--ssh=-oProxyCommand=x@host"], ["--adb=-x"],
    ["--adb", "a b"], ["--adb", "R5CX", "--adb-port", "70000"], ["--adb-port", "nan"],
])
def test_a_connection_ssh_or_adb_would_misread_is_refused(flags, tmp_path, capfd):
    check_case(capfd, tmp_path, ["devices", "check", "host", *flags], 2)


# --- how errors reach the user --------------------------------------------------------------------------------

@pytest.mark.parametrize(("error", "code", "expected"), [
    (EdgepruneError("a plain failure\nwith a second line"), 1, "edgeprune: error: a plain failure | with a second"),
    (RuntimeError("boom"), 1, "edgeprune: internal error: RuntimeError: boom (run with --debug for the traceback)"),
    (KeyError("k"), 1, "internal error: KeyError: 'k'"),
    # a full disk reported by a library's own write (no file name): the user's to fix, exit 2
    (OSError(28, "No space left on device"), 2, "edgeprune: error: no space left on the disk (it needed more room"),
    (OSError(5, "Input/output error"), 1, "Input/output error (run with --debug"),
    (KeyboardInterrupt(), 130, "interrupted"),
])
def test_every_error_is_one_line_and_debug_shows_the_traceback(error, code, expected, tmp_path, capfd,
                                                              monkeypatch):
    def fail(args: object) -> int:
        raise error

    monkeypatch.setattr(edgeprune.cli.pruning, "run_score", fail)
    check_case(capfd, tmp_path, ["score", "--out", str(tmp_path / "s.json")], code, expected)
    with pytest.raises(type(error)):
        main(["--debug", "score", "--out", str(tmp_path / "s.json")])
    with pytest.raises(type(error)):
        main(["score", "--out", str(tmp_path / "s.json"), "--debug"])
