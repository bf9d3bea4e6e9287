"""Which models a task kind can run, and whether a model folder's files are whole: checked from the config and
the weight files' headers when the task is built, before any weights load.

A model is one of three kinds, told from its config's `model_type` by the transformers registries: a text
encoder (BERT, RoBERTa, DistilBERT, MiniLM, ...), a decoder (a causal LM: Llama, Qwen2, SmolLM2, ...) or a
vision model (ViT, ...).
"""

import json
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgeprune.errors import UserInputError

ENCODER, DECODER, VISION = "text encoder", "decoder", "vision model"
EXAMPLES = {ENCODER: "BERT, RoBERTa, DistilBERT or MiniLM", DECODER: "a causal LM: Llama, Qwen2 or SmolLM2",
            VISION: "ViT"}
TASKS_FOR = {ENCODER: "--task classification or --task embedding", DECODER: "--task causal-lm",
             VISION: "--task image-classification"}
SAFETENSORS_HEADER_LIMIT = 100 << 20  # bytes; safetensors itself refuses larger headers


@dataclass(frozen=True)
class ModelKind:
    kind: str | None  # ENCODER, DECODER, VISION; None when the registries do not know the model type
    model_type: str
    architecture: str  # the first of config.architectures, or ""

    @property
    def name(self) -> str:
        return self.architecture or self.model_type or "an unnamed model"


def read_config(path: Path) -> Any:  # a transformers PretrainedConfig
    """The folder's config.json through transformers; a config it cannot read is one line, exit 2."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as error:
        message = " ".join(str(error).split())
        message = message if len(message) <= 300 else message[:300] + "..."
        raise UserInputError(f"cannot read the model config {path / 'config.json'}: {message}") from None


def model_kind(path: Path) -> ModelKind:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        MODEL_MAPPING_NAMES,
    )

    config = read_config(path)
    model_type = str(getattr(config, "model_type", "") or "")
    architectures = getattr(config, "architectures", None) or [""]
    architecture = str(architectures[0]) if isinstance(architectures, list | tuple) else ""
    if model_type in MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        kind: str | None = VISION
    elif model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        kind = DECODER
    elif model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES or model_type in MODEL_MAPPING_NAMES:
        kind = ENCODER
    else:
        kind = None
    return ModelKind(kind, model_type, architecture)


def check_model_for_task(task: str, path: Path, accepted: tuple[str, ...], extra: str = "") -> ModelKind:
    """Refuse a model whose kind the task cannot run, naming both; `extra` says what else would be accepted."""
    found = model_kind(path)
    if found.kind is not None and found.kind not in accepted:
        needed = " or ".join(f"a {kind} ({EXAMPLES[kind]})" for kind in accepted)
        raise UserInputError(f"task {task} needs {needed}{extra}, but {path} holds a {found.kind} ({found.name}); "
                             f"with this model use {TASKS_FOR[found.kind]}")
    return found


def check_model_folder(path: Path) -> ModelKind:
    """A model folder edgeprune can load: a config transformers reads and weight files in one piece."""
    if not path.is_dir() or not (path / "config.json").is_file():
        raise UserInputError(f"model path {path} is not a model folder (no config.json found there); pass a Hugging "
                             "Face model folder or one written by edgeprune")
    found = model_kind(path)
    check_weight_files(path)
    return found


def check_weight_files(folder: Path) -> None:
    """Refuse weight files that are cut off or not what their name says, from their headers alone.

    safetensors: the JSON header's tensor offsets must lie within the file; PyTorch `.bin` zip archives must have
    their central directory (a cut-off zip loses it).
    """
    for file in sorted(folder.glob("*.safetensors")):
        problem = _safetensors_problem(file)
        if problem:
            raise UserInputError(f"weights file {file} {problem}; copy or save the model again")
    for file in sorted(folder.glob("*.bin")):
        try:
            with file.open("rb") as handle:
                zipped = handle.read(2) == b"PK"
        except OSError as error:
            raise UserInputError(f"cannot read weights file {file}: {error.strerror or error}") from None
        if zipped and not zipfile.is_zipfile(file):
            raise UserInputError(f"weights file {file} is cut off (its zip directory is missing); copy or save the "
                                 "model again")


def _safetensors_problem(file: Path) -> str | None:
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            if size < 8:
                return f"is not a safetensors file ({size} bytes)"
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > min(SAFETENSORS_HEADER_LIMIT, size - 8):
                return "is not a safetensors file (its header length is beyond the file)"
            header = json.loads(handle.read(length).decode("utf-8"))
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    except (UnicodeDecodeError, ValueError, RecursionError):
        return "is not a safetensors file (its header is not JSON)"
    if not isinstance(header, dict):
        return "is not a safetensors file (its header is not a JSON object)"
    end = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            return f"is not a safetensors file (tensor {name!r} has no valid data_offsets)"
        end = max(end, offsets[1])
    if 8 + length + end > size:
        return f"is cut off: {size} bytes of the {8 + length + end} its header states"
    return None
