"""A third party's model family is one module in a package of its own, found through the `edgeprune.families` entry
points as edgeprune's own families are (edgeprune/plugins.py): here an encoder architecture edgeprune has never
seen, registered with transformers' Auto classes and given an adapter in the same module. Installed on the path of a
fresh interpreter, with no change to edgeprune, its folders go through `prune`, `export`, `bench` and `fit` from
the command line (`score` too), and a pruned folder loads back with its structure."""

import json
import subprocess
import sys

import pytest

from tests.conftest import small_vocab_tokenizer_files
from tests.plugins import install_plugin, run_edgeprune

pytestmark = pytest.mark.integration

PLUGIN = '''
"""The toy encoder: an architecture (config and model, registered with transformers) and its edgeprune adapter."""
import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from edgeprune.models.base import ADAPTERS, FeedForwardLayout
from edgeprune.models.separate_projections import ProjectionLayout, SeparateProjectionsAdapter


class ToyConfig(PretrainedConfig):
    model_type = "toy-encoder"

    def __init__(self, vocab_size=500, hidden_size=64, num_hidden_layers=2, heads=4, ffn=128, positions=64,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        self.heads, self.ffn, self.positions = heads, ffn, positions


class ToyAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads, self.head_size = config.heads, config.hidden_size // config.heads
        width = self.heads * self.head_size
        self.wq, self.wk, self.wv = (nn.Linear(config.hidden_size, width) for _ in range(3))
        self.wo = nn.Linear(width, config.hidden_size)

    def forward(self, hidden, mask):
        batch, length, _ = hidden.shape
        q, k, v = (p(hidden).view(batch, length, self.heads, self.head_size).transpose(1, 2)
                   for p in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-1, -2) / self.head_size ** 0.5 + mask
        probs = scores.softmax(-1)
        context = (probs @ v).transpose(1, 2).reshape(batch, length, self.heads * self.head_size)
        return self.wo(context), probs


class ToyLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = ToyAttention(config)
        self.norm1, self.norm2 = nn.LayerNorm(config.hidden_size), nn.LayerNorm(config.hidden_size)
        self.up, self.act, self.down = nn.Linear(config.hidden_size, config.ffn), nn.GELU(), nn.Linear(config.ffn,
                                                                                                        config.hidden_size)

    def forward(self, hidden, mask):
        hidden = self.norm1(hidden + self.attn(hidden, mask)[0])
        return self.norm2(hidden + self.down(self.act(self.up(hidden))))


class ToyModel(PreTrainedModel):
    config_class = ToyConfig
    base_model_prefix = "toy"

    def __init__(self, config):
        super().__init__(config)
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.positions = nn.Embedding(config.positions, config.hidden_size)
        self.layers = nn.ModuleList(ToyLayer(config) for _ in range(config.num_hidden_layers))
        self.post_init()

    def get_input_embeddings(self):
        return self.tokens

    def set_input_embeddings(self, value):
        self.tokens = value

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = (1.0 - attention_mask[:, None, None, :].float()) * -1e9
        hidden = self.tokens(input_ids) + self.positions(torch.arange(input_ids.shape[1], device=input_ids.device))
        for layer in self.layers:
            hidden = layer(hidden, mask)
        return BaseModelOutput(last_hidden_state=hidden)


AutoConfig.register("toy-encoder", ToyConfig)
AutoModel.register(ToyConfig, ToyModel)


@ADAPTERS.register("toy")
class ToyAdapter(SeparateProjectionsAdapter):
    family = "toy"
    layout = ProjectionLayout(attention="attn", query="attn.wq", key="attn.wk", value="attn.wv", output="attn.wo",
                              heads_attr="heads", size_attr="head_size", dense_heads_config="heads")
    ffn_layout = FeedForwardLayout(inputs=("up",), activation="act", output="down")

    @staticmethod
    def is_layer(module):
        return isinstance(module, ToyLayer)
'''

MAKE_MODEL = """
import sys, torch, toy_family
torch.manual_seed(1)
toy_family.ToyModel(toy_family.ToyConfig(vocab_size=int(sys.argv[2]))).eval().save_pretrained(sys.argv[1])
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The plugin installed as a distribution on a path of its own, and a random toy encoder saved by it."""
    root = tmp_path_factory.mktemp("family-plugin")
    env = install_plugin(root, "toy_family", PLUGIN, "edgeprune.families", "toy")
    model = root / "toy"
    model.mkdir()
    vocab = small_vocab_tokenizer_files(model, words=500)
    done = subprocess.run([sys.executable, "-c", MAKE_MODEL, str(model), str(vocab)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return {"root": root, "model": model, "env": env}


def edgeprune(installed: dict, *args: str) -> subprocess.CompletedProcess:
    return run_edgeprune(installed["root"], installed["env"], *args)


TASK = ["--task", "minilm-bbc", "--max-length", "32"]


def test_score_prune_export_and_bench_a_family_edgeprune_does_not_ship(installed):
    root, model = installed["root"], installed["model"]
    done = edgeprune(installed, "score", "--model", str(model), *TASK, "--examples", "16", "--out",
                     str(root / "scores.json"), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    done = edgeprune(installed, "prune", "--model", str(model), *TASK, "--scores", str(root / "scores.json"),
                     "--remove", "3", "--examples", "16", "--out", str(root / "pruned"), "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    plan = json.loads((root / "pruned" / "plan.json").read_text())
    assert plan["heads_removed"] == 3 and sum(len(kept) for kept in plan["kept_heads"]) == 5
    check = ("import sys, edgeprune; from edgeprune.models import adapter_for; m = edgeprune.load(sys.argv[1]); "
             "print(adapter_for(m).family, [b.num_heads for b in adapter_for(m).attention_blocks(m)])")
    loaded = subprocess.run([sys.executable, "-c", check, str(root / "pruned")], env=installed["env"],
                            capture_output=True, text=True, timeout=300)
    family, heads = loaded.stdout.split(" ", 1)
    assert family == "toy" and sorted(json.loads(heads)) == sorted(len(kept) for kept in plan["kept_heads"])
    artifact = root / "toy.pte"
    done = edgeprune(installed, "export", "--model", str(root / "pruned"), *TASK, "--out", str(artifact), "--quiet")
    assert done.returncode == 0 and artifact.stat().st_size > 0, done.stderr[-3000:]
    done = edgeprune(installed, "bench", str(artifact), "--model", str(root / "pruned"), "--max-length", "32",
                     "--runs", "5", "--warmup", "1", "--threads", "1", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["p50_ms"] > 0, done.stderr[-3000:]


def test_fit_searches_a_family_edgeprune_does_not_ship(installed):
    out = installed["root"] / "fit"
    done = edgeprune(installed, "fit", "--model", str(installed["model"]), *TASK, "--device", "host", "--max-mb",
                     "0.2", "--recipe", "int8", "--scoring-examples", "16", "--recover-steps", "0",
                     "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    fitted = result["fitted"]
    assert fitted["file_bytes"] <= 0.2e6 < result["dense"]["file_bytes"]
    assert fitted["verification"]["min_cosine"] >= 0.99
