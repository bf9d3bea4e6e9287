"""Pruned folders that load outside edgeprune: stock transformers, sentence-transformers, the tokenizer.

`edgeprune.save` calls `add_remote_code` on every Hugging Face folder it writes: config.json gets, per layer, the
query and key/value head counts, the FFN width and which output projections carry a bias (`edgeprune_*` keys), and
an `auto_map` naming the classes of `modeling_edgeprune.py`, which it writes next to it. That file (the package-data
template `remote_code/modeling_edgeprune.py` plus the classes of this folder) subclasses the stock transformers
classes and gives each layer its recorded widths, so
`AutoModel.from_pretrained(folder, trust_remote_code=True)` (or the task class the model was saved as) builds the
pruned model and computes what `edgeprune.load(folder)` computes. `copy_companion_files` then copies from the folder
the model came from what other tools read beside the weights: tokenizer and image-processor files, and a
sentence-transformers folder's modules.json, pooling and normalization modules and settings.
"""

import json
import shutil
from pathlib import Path
from typing import Any

from torch import nn

from edgeprune.errors import UserInputError
from edgeprune.models import adapter_for
from edgeprune.models.base import NoFeedForwardError

REMOTE_CODE_NAME = "modeling_edgeprune.py"
TEMPLATE = Path(__file__).with_name("remote_code") / REMOTE_CODE_NAME
# config keys edgeprune.save adds to config.json for the remote code (the template's PER_LAYER_KEYS and options)
REMOTE_CODE_CONFIG_KEYS = ("edgeprune_heads_per_layer", "edgeprune_kv_heads_per_layer", "edgeprune_ffn_widths",
                           "edgeprune_attention_output_bias", "edgeprune_ffn_output_bias",
                           "edgeprune_construction_options")
# Auto classes a saved class may be named under, and the transformers table that says which class each one builds
AUTO_CLASSES = (
    ("AutoModel", "MODEL_MAPPING_NAMES"),
    ("AutoModelForSequenceClassification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("AutoModelForTokenClassification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    ("AutoModelForQuestionAnswering", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES"),
    ("AutoModelForMultipleChoice", "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES"),
    ("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("AutoModelForPreTraining", "MODEL_FOR_PRETRAINING_MAPPING_NAMES"),
    ("AutoModelForImageClassification", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
)
# files of a model folder that describe its inputs (tokenizer, image processor, chat template)
INPUT_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json", "added_tokens.json",
               "merges.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
               "chat_template.jinja", "chat_template.json", "preprocessor_config.json", "processor_config.json")
# files of a sentence-transformers folder beside its modules' folders
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")

_CONFIG_CLASS = '''

class {name}({base}):
    """{base} plus, per layer, the widths of the pruned model (None: as {base} builds it)."""

    edgeprune_heads_per_layer: list[int] | None = None
    edgeprune_kv_heads_per_layer: list[int] | None = None
    edgeprune_ffn_widths: list[int] | None = None
    edgeprune_attention_output_bias: list[bool] | None = None
    edgeprune_ffn_output_bias: list[bool] | None = None
    edgeprune_construction_options: dict | None = None
'''
_MODEL_CLASS = '''

class {name}({base}):
    config_class = {config}

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **with_saved_options({base}, config, args, kwargs))
        resize_layers(self, config, "{family}")
        self.post_init()  # initialize the resized projections like the rest (from_pretrained then loads the weights)
'''


def stock_class(cls: type) -> type:
    """The transformers class `cls` is or derives from (a model loaded through this remote code is a subclass)."""
    return next((c for c in cls.__mro__ if c.__module__.startswith("transformers.models.")), cls)


def layer_record(model: nn.Module, options: dict[str, bool]) -> dict[str, Any]:
    """What the remote code needs, per current layer, read from the modules themselves; `options`: the constructor
    flags the weights need (`add_pooling_layer`, ...)."""
    adapter = adapter_for(model)
    blocks = adapter.attention_blocks(model)
    try:
        ffn = adapter.feed_forwards(model)
    except NoFeedForwardError:
        ffn = None
    return {
        "edgeprune_heads_per_layer": [b.num_heads for b in blocks],
        "edgeprune_kv_heads_per_layer": [b.num_kv_heads for b in blocks] if adapter.separate_kv_heads else None,
        "edgeprune_ffn_widths": None if ffn is None else [f.width for f in ffn],
        "edgeprune_attention_output_bias": [adapter.output_projection(model, b.layer).bias is not None
                                            for b in blocks],
        "edgeprune_ffn_output_bias": None if ffn is None else [f.output.bias is not None for f in ffn],
        "edgeprune_construction_options": options,
    }


def auto_classes(model_type: str, class_name: str) -> dict[str, str]:
    """{Auto class: class name} for a model of `model_type` saved as `class_name`: AutoModel builds the base model,
    and every task Auto class whose class for `model_type` is `class_name` builds that ({} for unknown types)."""
    from transformers.models.auto import modeling_auto

    base = modeling_auto.MODEL_MAPPING_NAMES.get(model_type)
    if not isinstance(base, str):
        return {}
    names = {"AutoModel": base}
    for auto, table in AUTO_CLASSES[1:]:
        if getattr(modeling_auto, table, {}).get(model_type) == class_name:
            names[auto] = class_name
    return names


def remote_code(config_base: str, classes: dict[str, str], family: str, layout: dict[str, Any]) -> str:
    """The text of modeling_edgeprune.py: the template, the family's layout (its adapter's `remote_layout`), then
    this folder's config class and model classes."""
    models = sorted(set(classes.values()))
    config_name = f"EdgePruned{config_base}"
    text = TEMPLATE.read_text(encoding="utf-8").rstrip("\n") + "\n\n"
    text += f"\nLAYOUTS[{family!r}] = LayerLayout(**{layout!r})\n"
    text += "\n# The classes of this folder, written by edgeprune.save.\n"
    text += f"from transformers import {', '.join(sorted({config_base, *models}))}  # noqa: E402\n"
    text += _CONFIG_CLASS.format(name=config_name, base=config_base)
    for model in models:
        text += _MODEL_CLASS.format(name=f"EdgePruned{model}", base=model, config=config_name, family=family)
    return text


def add_remote_code(model: nn.Module, directory: Path, options: dict[str, bool]) -> dict[str, str]:
    """Make the Hugging Face folder `directory` (just written from `model`) load with stock transformers and
    `trust_remote_code=True`; returns its `auto_map` ({} where the family or class has no remote code). `options`:
    the constructor flags its weights need, which the remote classes then default to."""
    try:
        adapter = adapter_for(model)
    except UserInputError:
        return {}
    import transformers

    config_file = directory / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    cls = stock_class(type(model))
    classes = auto_classes(str(config.get("model_type", "")), cls.__name__)
    config_base = stock_class(type(getattr(model, "config", None))).__name__
    importable = all(hasattr(transformers, name) for name in (config_base, *classes.values()))
    if adapter.remote_layout is None or not classes or not importable:
        return {}
    module = REMOTE_CODE_NAME.removesuffix(".py")
    auto_map = {"AutoConfig": f"{module}.EdgePruned{config_base}",
                **{auto: f"{module}.EdgePruned{name}" for auto, name in classes.items()}}
    config.update(layer_record(model, options))
    config["auto_map"] = auto_map
    config["architectures"] = [cls.__name__]  # the stock class: edgeprune.load builds it, then cuts it
    code = remote_code(config_base, classes, adapter.family, adapter.remote_layout)
    (directory / REMOTE_CODE_NAME).write_text(code, encoding="utf-8")
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return auto_map


def strip_remote_code(config: Any) -> None:
    """Remove what `add_remote_code` added from a loaded config, so the dense model built from it is a plain one
    (and a plain `save_pretrained` of it does not name a modelling file its folder lacks)."""
    for key in REMOTE_CODE_CONFIG_KEYS:
        if hasattr(config, key):
            delattr(config, key)
    auto_map = getattr(config, "auto_map", None)
    module = REMOTE_CODE_NAME.removesuffix(".py")
    if isinstance(auto_map, dict) and all(str(v).startswith(f"{module}.") for v in auto_map.values()):
        delattr(config, "auto_map")


def source_folder(model: nn.Module) -> Path | None:
    """The local folder `model` was loaded from (its config's name_or_path), if it still exists."""
    for module in model.modules():
        name = getattr(getattr(module, "config", None), "name_or_path", None)
        if name and Path(name).is_dir():
            return Path(name)
    return None


def copy_companion_files(source: Path, directory: Path) -> list[str]:
    """Copy from `source` (the model's original folder) into the saved `directory` what other tools read beside the
    weights; returns the names copied. Nothing is overwritten. Tokenizer files are left out when the vocabulary
    sizes differ (a trimmed vocabulary: its ids are not the tokenizer's)."""
    if source.resolve() == directory.resolve():
        return []
    copied = []
    names = list(INPUT_FILES) if _same_vocabulary(source, directory) else ["preprocessor_config.json"]
    modules = _sentence_transformers_modules(source)
    if modules is not None:
        names += [n for n in SENTENCE_TRANSFORMERS_FILES if (source / n).is_file()]
    for name in names:
        if (source / name).is_file() and not (directory / name).exists():
            shutil.copy2(source / name, directory / name)
            copied.append(name)
    for path in modules or []:
        if (source / path).is_dir() and not (directory / path).exists():
            shutil.copytree(source / path, directory / path)
            copied.append(path)
    return copied


def _same_vocabulary(source: Path, directory: Path) -> bool:
    sizes = []
    for folder in (source, directory):
        try:
            sizes.append(json.loads((folder / "config.json").read_text(encoding="utf-8")).get("vocab_size"))
        except (OSError, ValueError, AttributeError):
            return False
    return sizes[0] == sizes[1]


def _sentence_transformers_modules(source: Path) -> list[str] | None:
    """The module folders a sentence-transformers `source` names (its Transformer at the root), else None."""
    try:
        modules = json.loads((source / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        return None
    paths = [str(m.get("path", "")) for m in modules]
    transformers = [p for m, p in zip(modules, paths, strict=True) if str(m.get("type", "")).endswith("Transformer")]
    if transformers != [""]:  # the pruned model is saved at the folder's root, so its Transformer must be there
        return None
    return [p for p in paths if p and not Path(p).is_absolute() and ".." not in Path(p).parts]
