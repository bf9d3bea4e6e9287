"""`model.json`: what an app (and `edgeprune bench`) needs to know about a shipped artifact, read from the artifact.

Every input and output with its shape and dtype as the runtime takes it, the runtime and its version, the file's
sha256, the operators and delegates the program uses; a fit adds the task's names, meanings and value ranges of the
tensors, the recipe and the files that ship beside it.
"""

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeprune.errors import UserInputError
from edgeprune.export.program_facts import RuntimeInfo, TensorSpec
from edgeprune.serialization import from_jsonable, to_jsonable, write_json_atomic

MANIFEST_NAME = "model.json"
MANIFEST_FORMAT_VERSION = 1


@dataclass
class TokenizerFacts:
    """The tokenizer files that ship beside the artifact, and whether their ids are the artifact's as they are."""

    files: list[str]
    gives_artifact_ids: bool  # True: feed the tokenizer's ids straight in; False: map them through `id_map` first
    trimmed_vocabulary_size: int | None = None  # rows of the artifact's embedding table when the vocabulary was trimmed
    original_vocabulary_size: int | None = None  # the original tokenizer's size, when the vocabulary was trimmed
    id_map: str | None = None  # original ids -> artifact ids, when the tokenizer files could not be rewritten
    note: str = ""


@dataclass
class GeneratorSpec:
    """A KV-cached generator's facts, from its program's metadata: how to prefill and decode it, and its cache."""

    context: int  # cache slots: prompt plus generated tokens
    max_seq_len: int  # tokens one forward takes (a prefill chunk)
    attention: str  # "fast" (ExecuTorch's LLM kernels: load them before the program) or "portable"
    kv_cache_bytes: int  # the cache's bytes at `context`
    kv_bytes_per_token: int
    eos_ids: list[int] = field(default_factory=list)
    bos_id: int | None = None
    vocab_size: int | None = None  # None in a model.json written before it was recorded


@dataclass
class ModelManifest:
    artifact: str  # the file's name, in the folder that holds this model.json
    sha256: str
    file_bytes: int
    runtime: RuntimeInfo
    method: str  # ExecuTorch's method, LiteRT's signature key
    inputs: list[TensorSpec]  # in call order
    outputs: list[TensorSpec]  # in the order the runtime returns them
    operators: list[str]
    delegates: list[str]
    notes: list[str] = field(default_factory=list)
    recipe: str | None = None  # edgeprune's quantization recipe, when edgeprune made it
    task: str | None = None  # the task kind it was fitted for
    metric: str | None = None
    tokenizer: TokenizerFacts | None = None
    files: list[str] = field(default_factory=list)  # what ships beside it (tokenizer, labels, usage)
    generator: GeneratorSpec | None = None  # a KV-cached generator's facts (a causal-lm fit)
    format_version: int = MANIFEST_FORMAT_VERSION  # of this schema; `load` refuses a newer one

    def save(self, path: Path) -> Path:
        write_json_atomic(Path(path), to_jsonable(self))
        return Path(path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ModelManifest":
        version = data.get("format_version")
        if not isinstance(version, int) or version > MANIFEST_FORMAT_VERSION:
            raise UserInputError(f"model.json format {version!r}: this edgeprune reads up to "
                                 f"{MANIFEST_FORMAT_VERSION}; upgrade edgeprune")
        return from_jsonable(cls, data)

    @classmethod
    def load(cls, path: Path) -> "ModelManifest":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise TypeError("not a JSON object")
            return cls.from_dict(data)
        except UserInputError:
            raise
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise UserInputError(f"{path} is not a model.json edgeprune can read ({type(error).__name__}: "
                                 f"{error})") from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def inspect_artifact(path: Path, runtime: str | None = None) -> ModelManifest:
    """The manifest of any `.pte` / `.tflite`, read from the file by its runtime (tensors keep the runtime's names).

    Refuses (exit 2 / 4, like `check_artifact`) a file of no known runtime or one its runtime cannot read."""
    from edgeprune.export.artifacts import check_artifact
    from edgeprune.runtimes import RUNTIMES

    path = Path(path)
    name = check_artifact(path, runtime)
    facts = RUNTIMES.get(name).program.inspect(path)
    return ModelManifest(artifact=path.name, sha256=file_sha256(path), file_bytes=path.stat().st_size,
                         runtime=facts.runtime, method=facts.method, inputs=facts.inputs, outputs=facts.outputs,
                         operators=facts.operators, delegates=facts.delegates, notes=facts.notes,
                         generator=generator_spec(facts.constants))


def generator_spec(constants: dict[str, Any]) -> GeneratorSpec | None:
    """The generator facts of a program's constant methods; None when it is not a KV-cached generator."""
    if not constants.get("use_kv_cache"):
        return None
    prefill = int(constants["get_max_seq_len"])
    context = int(constants.get("get_max_context_len", prefill))  # ExecuTorch's runner defaults it so too
    cache = int(constants.get("get_kv_cache_bytes", 0))
    eos = constants.get("get_eos_ids", [])
    vocab = constants.get("get_vocab_size")
    return GeneratorSpec(context, prefill, "fast" if constants.get("use_sdpa_with_kv_cache") else "portable", cache,
                         cache // context, [int(e) for e in (eos if isinstance(eos, list) else [eos])],
                         None if constants.get("get_bos_id") is None else int(constants["get_bos_id"]),
                         None if vocab is None else int(vocab))


def manifest_beside(path: Path) -> tuple[ModelManifest | None, str]:
    """The model.json in the artifact's folder when it describes this very file (its name and sha256), else None;
    and why it was or was not taken."""
    path = Path(path)
    candidate = path.parent / MANIFEST_NAME
    if not candidate.is_file():
        return None, f"no {MANIFEST_NAME} beside {path.name}"
    manifest = ModelManifest.load(candidate)
    if manifest.artifact != path.name:
        return None, f"{candidate} describes {manifest.artifact}, not {path.name}"
    if manifest.sha256 != file_sha256(path):
        return None, f"{candidate} describes another {path.name} (its sha256 differs)"
    return manifest, f"{candidate}"
