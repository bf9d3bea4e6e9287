"""Shared fixtures: tiny random models (fast) and an isolated cache."""

import os
import shutil
import signal
from pathlib import Path

import pytest
import torch

from edgeprune.tasks import minilm_model_path


def threads_per_worker() -> int | None:
    """Under `make test`'s xdist workers, each worker's share of the cores (None when not under xdist). Torch's
    default is one thread per core in every process; two workers at two threads each on two cores thrash (measured
    here: two demo fits at once took 420 s at torch's default, 204 s at one thread each, 268 s one after the other),
    so each worker and every process it starts (OMP_NUM_THREADS is inherited) keeps to its share."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if os.environ.get("PYTEST_XDIST_WORKER") is None or not workers:
        return None
    return max(1, (os.cpu_count() or 1) // int(workers))


if threads_per_worker() is not None:
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads_per_worker())
    torch.set_num_threads(threads_per_worker())

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def tiny_bert_config(**overrides):
    from transformers import BertConfig

    options = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                   intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    options.update(overrides)
    return BertConfig(**options)


def tiny_bert(seed: int = 0, **overrides):
    from transformers import BertModel

    torch.manual_seed(seed)
    return BertModel(tiny_bert_config(**overrides)).eval()


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A tiny random BERT saved as a Hugging Face folder with the real MiniLM tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    tiny_bert().save_pretrained(folder)
    for name in TOKENIZER_FILES:
        source = minilm_model_path() / name
        if source.exists():
            shutil.copy(source, folder / name)
    return folder


@pytest.fixture
def one_thread():
    """One torch thread while a test trains: distillation steps on tiny models are faster, and repeatable."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def shared_between_workers(tmp_path_factory, name: str) -> Path:
    """A folder every pytest-xdist worker of this run shares (`make test` runs two, each taking whole test files):
    the caches below are keyed by content and written whole then renamed (edgeprune.serialization), so two workers
    filling one entry at once waste work at worst, never corrupt it. Without xdist, a folder of this session's."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return tmp_path_factory.mktemp(name)
    folder = tmp_path_factory.getbasetemp().parent / name  # the workers' base folders are siblings
    folder.mkdir(exist_ok=True)
    return folder


# The files that took longest in `make test` (summed test time, 2026-12-03), longest first. Under two workers taking
# whole files in collection order (`--dist loadfile --no-loadscope-reorder`), these start first and the short files
# fill in around them, so that no long file starts last and runs alone (a hint: a file missing here only runs later).
LONGEST_FILES = (
    "test_cli_score_prune.py", "test_readme_commands.py", "test_recipes.py", "test_fit_recovery.py", "test_cluster.py",
    "test_minilm_fit.py", "test_decoder_recipe.py", "test_litert_generator.py", "test_fit_decoder_litert.py",
    "test_fit_integration.py", "test_fit_kill_anywhere.py", "test_fit_decoder.py", "test_fit_resume_and_budgets.py",
    "test_fleet.py", "test_runtime_dimension.py", "test_fit_auto_recovery.py", "test_ray_address.py",
    "test_progress_cli.py", "test_byo_minilm.py", "test_cli_artifacts.py", "test_app_handoff.py",
    "test_transport_plugin.py", "test_family_plugin.py", "test_runtime_plugin.py",
    "test_generation.py", "test_ssh_transport.py", "test_recipe_int8_static.py", "test_cache.py",
    "test_full_disk.py", "test_build_job.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order


@pytest.fixture(scope="module")
def one_ray_cluster_at_a_time(tmp_path_factory):
    """Held by a test module that starts a Ray cluster, for as long as the module runs: under `make test`'s two
    workers two modules each starting a cluster on this machine would compete for its ports and cores."""
    import fcntl

    with open(shared_between_workers(tmp_path_factory, "locks") / "ray.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(scope="session")
def session_exports(tmp_path_factory) -> Path:
    return shared_between_workers(tmp_path_factory, "exports")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory, monkeypatch, session_exports):
    """A fresh cache folder per test (teachers, scores), but one export cache for the session: an export is keyed
    by the weights, the recipe and the example's shapes, so a test finding another test's identical export gets the
    same bytes, only sooner (a dense baseline of the shared small BERT is otherwise lowered again in every fit).
    A test about the export cache itself points EDGEPRUNE_CACHE at a folder of its own. (Teachers stay per test:
    several tests check what a teacher build leaves in the cache, or that a step builds none.)"""
    cache = tmp_path_factory.mktemp("cache")  # beside the test's tmp_path, which stays as the test left it
    (cache / "exports").symlink_to(session_exports, target_is_directory=True)
    monkeypatch.setenv("EDGEPRUNE_CACHE", str(cache))


@pytest.fixture(scope="session", autouse=True)
def ctrl_c_as_in_a_terminal():
    """Ctrl-C as a terminal's foreground job has it. A job a shell starts in the background without job control
    (`pytest &` in a script) begins with SIGINT ignored (POSIX), Python then keeps it ignored and every child
    inherits that: the tests that interrupt a fit or a device command would wait out their timeouts instead."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


@pytest.fixture(autouse=True)
def ctrl_c_still_works():
    """Every test leaves the process as Ctrl-C needs it: SIGINT neither blocked in the main thread (a child started
    later inherits the mask and never sees the signal) nor handled by anything but Python's default handler."""
    yield
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handler = signal.getsignal(signal.SIGINT)
    assert not blocked and handler is signal.default_int_handler, (
        f"this test left SIGINT {'blocked' if blocked else f'handled by {handler!r}'}: Ctrl-C no longer works")


@pytest.fixture(scope="session")
def minilm_cache(tmp_path_factory) -> Path:
    """One cache folder for the tests that run the bundled MiniLM task with its defaults (the README's commands,
    the demo fit): its dense teacher (about 100 s here) is then built once per session. The cache is keyed by
    content, so sharing it changes no result, only what is rebuilt."""
    return shared_between_workers(tmp_path_factory, "minilm-cache")


def small_vocab_tokenizer_files(folder: Path, words: int = 2000) -> int:
    """Write a BERT tokenizer whose vocabulary is MiniLM's specials plus its first common word pieces.

    A small vocabulary keeps the embedding table small, so head removal dominates the file size.
    Returns the vocabulary size.
    """
    from transformers import BertTokenizerFast

    lines = (minilm_model_path() / "vocab.txt").read_text().splitlines()
    vocab = lines[:104] + lines[1996:1996 + words]  # [PAD], [unused], [UNK], [CLS], [SEP], [MASK]; then words
    vocab_file = folder / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab={token: index for index, token in enumerate(vocab)}, do_lower_case=True)
    assert len(tokenizer) == len(vocab)
    tokenizer.save_pretrained(folder)
    return len(vocab)


@pytest.fixture(scope="session")
def small_bert_dir(tmp_path_factory) -> Path:
    """A small random BERT (wide heads, small vocabulary) in a Hugging Face folder with its tokenizer."""
    folder = tmp_path_factory.mktemp("small-bert")
    vocab_size = small_vocab_tokenizer_files(folder)
    tiny_bert(seed=1, vocab_size=vocab_size, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
              intermediate_size=128, max_position_embeddings=64).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def small_bert_int8_bytes(small_bert_dir, tmp_path_factory):
    """The real size of an int8 export of the small BERT's classifier with that many heads gone per layer: a
    function, each count exported once per session (fit tests set budgets between such sizes)."""
    from transformers import AutoModel

    from edgeprune.export import export
    from edgeprune.models.classifier import EncoderClassifier
    from edgeprune.pruning import prune_heads

    sizes: dict[int, int] = {}
    folder = tmp_path_factory.mktemp("int8-probes")

    def size(heads_removed_per_layer: int) -> int:
        if heads_removed_per_layer not in sizes:
            encoder = AutoModel.from_pretrained(small_bert_dir, add_pooling_layer=False)
            prune_heads(encoder, {layer: list(range(heads_removed_per_layer)) for layer in range(2)})
            model = EncoderClassifier(encoder, torch.nn.Linear(128, 5)).eval()
            inputs = (torch.ones(1, 32, dtype=torch.long), torch.ones(1, 32, dtype=torch.long))
            target = folder / f"probe-{heads_removed_per_layer}.pte"
            sizes[heads_removed_per_layer] = export(model, inputs, target, "int8").size_bytes
        return sizes[heads_removed_per_layer]
    return size


@pytest.fixture(scope="session")
def bbc_sample():
    """Every fifth BBC News article (445), in a fixed order: enough for all three splits."""
    from edgeprune.data import load_bbc_news

    return load_bbc_news()[::5]
