"""Pruned folders leave edgeprune: stock `transformers` Auto classes (`trust_remote_code=True`) load what
`edgeprune.save` wrote, in a process where edgeprune cannot be imported, and compute what `edgeprune.load` computes
(atol 1e-5) for every family the remote code knows, after uneven head removal (whole KV groups and per-group heads on
the decoders), a removed layer, uneven FFN widths and bias compensation. `--model` and the API also take a Hugging Face
model id present in the local Hugging Face cache, resolved offline."""

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

import edgeprune
from edgeprune.cli import main
from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.interop import REMOTE_CODE_NAME
from edgeprune.pruning.ffn import neuron_statistics, remove_neurons

SCRIPT = Path(__file__).parent / "fixtures" / "load_without_edgeprune.py"
VOCAB = 200
HEADS = {0: [0], 1: [1, 2], 2: [3], 3: [0, 1, 3]}  # 4 layers of 4 heads: 3, 2, 3, 1 remain
GQA_HEADS = {0: [2, 3], 2: [1, 3], 3: [0, 1, 2]}  # a whole KV group; one per group; a group and one more
FFN = {0: list(range(10)), 2: [5, 7, 20]}  # after layer 1 goes: widths 54, 64, 61 (dense 64) or 86, 96, 93 (96)
ATOL = 1e-5


def run_without_edgeprune(jobs: list[dict], folder: Path) -> dict:
    """Run the jobs in a fresh Python where `import edgeprune` fails, offline; returns their results."""
    jobs_file, results_file = folder / "jobs.json", folder / "results.pt"
    jobs_file.write_text(json.dumps(jobs))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(folder / "hf-modules"),
           "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(SCRIPT), str(jobs_file), str(results_file)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(results_file)


def _tokens() -> dict[str, torch.Tensor]:
    ids = torch.randint(3, VOCAB, (2, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _pixels() -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))}


def _encoder_options() -> dict:
    return dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                max_position_embeddings=70)


def _decoder(config: str, model: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        options = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        return getattr(transformers, model)(getattr(transformers, config)(**options))

    return build


def _built(name: str, *args: object, **options: object) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import transformers

        config_cls, model_cls = name.split(".")
        return getattr(transformers, model_cls)(getattr(transformers, config_cls)(**options), *args)

    return build


@dataclass(frozen=True)
class Case:
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict[str, torch.Tensor]]
    output: str  # the field of the saved class's output that is compared
    heads: dict[int, list[int]]
    auto_classes: tuple[str, ...]  # what config.json's auto_map must offer besides AutoConfig
    compensate: bool = False  # fold removed heads' and neurons' means into biases (adds biases Llama has not)


CASES = {
    "bert-without-pooler": Case(_built("BertConfig.BertModel", False, **_encoder_options()), _tokens,
                                "last_hidden_state", HEADS, ("AutoModel",)),
    "bert-sequence-classifier": Case(_built("BertConfig.BertForSequenceClassification", num_labels=3,
                                            **_encoder_options()), _tokens, "logits", HEADS,
                                     ("AutoModel", "AutoModelForSequenceClassification"), compensate=True),
    "roberta": Case(_built("RobertaConfig.RobertaModel", **_encoder_options(), pad_token_id=1), _tokens,
                    "pooler_output", HEADS, ("AutoModel",)),
    "distilbert-sequence-classifier": Case(
        _built("DistilBertConfig.DistilBertForSequenceClassification", vocab_size=VOCAB, dim=32, n_layers=4,
               n_heads=4, hidden_dim=64, max_position_embeddings=64, num_labels=3), _tokens, "logits", HEADS,
        ("AutoModel", "AutoModelForSequenceClassification")),
    "vit-image-classifier": Case(
        _built("ViTConfig.ViTForImageClassification", hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
               intermediate_size=64, image_size=16, patch_size=8, num_channels=3, num_labels=3), _pixels, "logits",
        HEADS, ("AutoModel", "AutoModelForImageClassification")),
    "llama-causal-lm": Case(_decoder("LlamaConfig", "LlamaForCausalLM"), _tokens, "logits", GQA_HEADS,
                            ("AutoModel", "AutoModelForCausalLM"), compensate=True),
    "qwen2-causal-lm": Case(_decoder("Qwen2Config", "Qwen2ForCausalLM"), _tokens, "logits", GQA_HEADS,
                            ("AutoModel", "AutoModelForCausalLM")),
}


def _pruned(case: Case) -> nn.Module:
    torch.manual_seed(0)
    model = case.build().eval()
    batches = [case.inputs()] if case.compensate else None
    edgeprune.prune_heads(model, case.heads, compensate=batches)
    adapter_for(model).remove_layers(model, [1])
    means = neuron_statistics(model, batches).means if batches else None
    remove_neurons(model, FFN, means=means)
    return model


@pytest.fixture(scope="module")
def stock_results(tmp_path_factory):
    """Every case pruned and saved, its expected outputs from edgeprune.load, and what stock transformers computes
    from each Auto class of its auto_map (one subprocess for all)."""
    root = tmp_path_factory.mktemp("loadable")
    jobs, expected, pruned = [], {}, {}
    for name, case in CASES.items():
        model = _pruned(case)
        folder = edgeprune.save(model, root / name)
        loaded = edgeprune.load(folder)
        inputs_file = root / f"{name}-inputs.pt"
        torch.save(case.inputs(), inputs_file)
        auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
        pruned[name] = (model, loaded, auto_map)
        for auto in auto_map:
            if auto == "AutoConfig":
                continue
            base = auto == "AutoModel" and loaded.base_model is not loaded
            reference = loaded.base_model if base else loaded
            field = "last_hidden_state" if base else case.output
            with torch.no_grad():
                expected[f"{name}/{auto}"] = (reference(**case.inputs())[field],
                                              sum(p.numel() for p in reference.parameters()))
            jobs.append({"name": f"{name}/{auto}", "kind": "transformers", "auto_class": auto, "folder": str(folder),
                         "inputs": str(inputs_file), "output": field})
    return run_without_edgeprune(jobs, root), expected, pruned


@pytest.mark.parametrize("name", list(CASES))
def test_stock_transformers_loads_the_pruned_folder_and_computes_the_same(name, stock_results):
    results, expected, pruned = stock_results
    model, loaded, auto_map = pruned[name]
    case = CASES[name]
    blocks = adapter_for(model).attention_blocks(model)
    widths = {f.width for f in adapter_for(model).feed_forwards(model)}
    assert len({b.num_heads for b in blocks}) > 1 and len(widths) > 1
    assert set(auto_map) == {"AutoConfig", *case.auto_classes}
    with torch.no_grad():  # edgeprune.load itself gives the pruned model back
        torch.testing.assert_close(loaded(**case.inputs())[case.output], model(**case.inputs())[case.output])
    for auto in case.auto_classes:
        result = results[f"{name}/{auto}"]
        output, parameters = expected[f"{name}/{auto}"]
        assert result["class"] == auto_map[auto].split(".")[-1]
        assert result["parameters"] == parameters
        torch.testing.assert_close(result["output"], output, atol=ATOL, rtol=0)


def test_the_config_records_each_layers_widths_and_edgeprune_forgets_them_on_load(stock_results, tmp_path):
    _, _, pruned = stock_results
    model, loaded, _ = pruned["llama-causal-lm"]
    folder = edgeprune.save(model, tmp_path / "saved")
    config = json.loads((folder / "config.json").read_text())
    attention = [layer.self_attn for layer in model.model.layers]
    size = attention[0].head_dim
    assert config["num_hidden_layers"] == 3
    assert config["edgeprune_heads_per_layer"] == [a.q_proj.out_features // size for a in attention] == [2, 2, 1]
    assert config["edgeprune_kv_heads_per_layer"] == [a.k_proj.out_features // size for a in attention] == [1, 2, 1]
    assert config["edgeprune_ffn_widths"] == [layer.mlp.down_proj.in_features for layer in model.model.layers]
    assert config["edgeprune_ffn_widths"] == [96 - len(FFN.get(i, [])) for i in range(3)]
    assert config["edgeprune_attention_output_bias"] == [True] * 3  # compensation added o_proj biases
    assert config["edgeprune_ffn_output_bias"] == [i in FFN for i in range(3)]  # and down_proj biases where cut
    assert config["architectures"] == ["LlamaForCausalLM"] and (folder / REMOTE_CODE_NAME).is_file()
    # the model edgeprune.load builds is a stock one: saving it with plain save_pretrained names no remote code
    assert not hasattr(loaded.config, "auto_map") and not hasattr(loaded.config, "edgeprune_heads_per_layer")


def test_a_plain_module_gets_no_remote_code(tmp_path):
    edgeprune.save(nn.Linear(2, 3), tmp_path / "linear")
    assert not (tmp_path / "linear" / REMOTE_CODE_NAME).exists()


def _cached_model(cache: Path, repo_id: str, source: Path) -> Path:
    """Lay `source`'s files out the way huggingface_hub caches a download: blobs named by content hash, a snapshot
    folder of links to them, refs/main naming the snapshot's revision."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    revision = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / revision
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for file in sorted(p for p in source.iterdir() if p.is_file()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / file.name).symlink_to(Path("../..") / "blobs" / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path, monkeypatch, tiny_bert_dir):
    cache = tmp_path / "hf-hub"
    snapshot = _cached_model(cache, "edgeprune-tests/tiny-bert", tiny_bert_dir)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache, snapshot


def test_a_model_id_in_the_local_cache_is_used_offline(hub_cache, tmp_path, capsys):
    from edgeprune.tasks import make_task

    cache, snapshot = hub_cache
    model = edgeprune.load("edgeprune-tests/tiny-bert")
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in edgeprune.load(snapshot).parameters())
    (tmp_path / "sentences.jsonl").write_text('{"text": "one"}\n')
    task = make_task("embedding", "edgeprune-tests/tiny-bert", tmp_path / "sentences.jsonl", max_length=32)
    assert task.model_path == snapshot
    plan = {"num_heads": [4, 4, 4], "kept_heads": [[0, 1], [2], [0, 1, 3]]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert main(["prune", "--model", "edgeprune-tests/tiny-bert", "--plan", str(tmp_path / "plan.json"),
                 "--no-compensate", "--out", str(tmp_path / "pruned")]) == 0
    pruned = edgeprune.load(tmp_path / "pruned")
    assert [b.num_heads for b in adapter_for(pruned).attention_blocks(pruned)] == [2, 1, 3]
    assert (tmp_path / "pruned" / "vocab.txt").read_text() == (snapshot / "vocab.txt").read_text()  # tokenizer kept


def test_a_model_id_missing_from_the_cache_is_one_line_naming_the_cache(hub_cache, tmp_path, capsys):
    cache, _ = hub_cache
    (tmp_path / "plan.json").write_text(json.dumps({"num_heads": [4], "kept_heads": [[0]]}))
    for argv in (["prune", "--model", "edgeprune-tests/absent", "--plan", str(tmp_path / "plan.json")],
                 ["score", "--model", "edgeprune-tests/absent"]):
        code = main([*argv, "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "edgeprune-tests/absent" in err and str(cache) in err and "Traceback" not in err
        assert not (tmp_path / "out").exists()
    with pytest.raises(UserInputError, match="not in the local cache"):
        edgeprune.load("edgeprune-tests/absent")


@pytest.mark.integration
def test_pruned_minilm_loads_in_transformers_and_sentence_transformers(tmp_path):
    """The bundled MiniLM (a sentence-transformers folder) pruned to uneven heads and FFN widths through the API, and
    to uneven heads by `edgeprune prune`: both folders keep its pooling, normalization and tokenizer, and stock
    AutoModel and SentenceTransformer compute what edgeprune.load and the embedding task's pooling compute."""
    from transformers import AutoTokenizer

    from edgeprune.models.classifier import EncoderEmbedder
    from edgeprune.tasks import minilm_model_path
    from edgeprune.tasks.embedding import sentence_transformers_pooling

    encoder = edgeprune.load(minilm_model_path())
    encoder.pooler = None  # as the embedding task uses it
    edgeprune.prune_heads(encoder, {0: [0, 1, 2], 1: [5], 3: list(range(8)), 5: [10, 11]})
    remove_neurons(encoder, {0: list(range(300)), 2: list(range(0, 1536, 3)), 4: [7]})
    edgeprune.save(encoder, tmp_path / "api")
    kept = [list(range(12))[n:] for n in (0, 4, 0, 7, 2, 11)]
    (tmp_path / "plan.json").write_text(json.dumps({"num_heads": [12] * 6, "kept_heads": kept}))
    assert main(["prune", "--plan", str(tmp_path / "plan.json"), "--no-compensate",
                 "--out", str(tmp_path / "cli")]) == 0

    texts = ["The central bank raised interest rates again.", "Short.", "Two teams of eleven play on grass."]
    jobs, expected = [], {}
    for name in ("api", "cli"):
        folder = tmp_path / name
        for file in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json", "vocab.txt",
                     "tokenizer.json", REMOTE_CODE_NAME):
            assert (folder / file).is_file(), file
        pooling = sentence_transformers_pooling(folder)
        assert (pooling.mode, pooling.normalize) == ("mean", True)
        model = edgeprune.load(folder)
        heads = [b.num_heads for b in adapter_for(model).attention_blocks(model)]
        assert heads == ([9, 11, 12, 4, 12, 10] if name == "api" else [12 - n for n in (0, 4, 0, 7, 2, 11)])
        tokens = dict(AutoTokenizer.from_pretrained(folder)(texts, padding=True, return_tensors="pt"))
        torch.save(tokens, tmp_path / f"{name}-inputs.pt")
        with torch.no_grad():
            embedder = EncoderEmbedder(model, pooling.mode, pooling.normalize).eval()
            expected[f"{name}/sentence-transformers"] = embedder(tokens["input_ids"], tokens["attention_mask"])[0]
            expected[f"{name}/AutoModel"] = model(**tokens).last_hidden_state
        jobs += [{"name": f"{name}/sentence-transformers", "kind": "sentence-transformers", "folder": str(folder),
                  "texts": texts},
                 {"name": f"{name}/AutoModel", "kind": "transformers", "auto_class": "AutoModel", "folder": str(folder),
                  "inputs": str(tmp_path / f"{name}-inputs.pt"), "output": "last_hidden_state"}]
    results = run_without_edgeprune(jobs, tmp_path)
    for key, output in expected.items():
        assert results[key]["class"] == "EdgePrunedBertModel"
        torch.testing.assert_close(results[key]["output"], output, atol=ATOL, rtol=0)
