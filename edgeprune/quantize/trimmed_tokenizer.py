"""Tokenizer files whose ids are a trimmed artifact's, so that an app feeds the tokenizer's ids straight in.

`tokenizer.json` (fast tokenizers) keeps every token of the original vocabulary and only renumbers it: kept tokens
get their artifact id, every other token the artifact's unknown-token id. It therefore splits text exactly as the
original tokenizer does, and its ids are what the original ids become through the `VocabularyMap`. That works for
the models whose vocabulary is a token -> id table (WordPiece, as in BERT and MiniLM, and WordLevel); a BPE or
Unigram model finds tokens by merges or by position, so it keeps the original ids and the app maps them through
`vocabulary.json`.

`vocab.txt` (one token per line, the line number is the id) lists the kept tokens in artifact-id order. A WordPiece
tokenizer built from it (e.g. an app's BertTokenizer) splits every word of the calibration and validation data
as the original did; a word with a piece that was never seen there may split differently (either way it reaches
the model as unknown pieces).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgeprune.quantize.vocabulary import VocabularyMap
from edgeprune.serialization import write_json_atomic, write_text_atomic

RENUMBERABLE_MODELS = ("WordPiece", "WordLevel")  # tokenizers models whose vocabulary is a token -> id table


@dataclass
class TokenizerRewrite:
    rewritten: list[str] = field(default_factory=list)  # files whose ids are now the artifact's
    unchanged: list[str] = field(default_factory=list)  # files that hold no ids (their tokens are strings)
    dropped: list[str] = field(default_factory=list)  # files that held original ids and could not be rewritten
    gives_artifact_ids: bool = False  # the shipped tokenizer's ids go straight into the artifact: no id map
    note: str = ""


def rewrite_tokenizer_files(folder: Path, vocabulary: VocabularyMap) -> TokenizerRewrite:
    """Rewrite the tokenizer files in `folder` (copied there from the model folder) in place to the artifact's ids.

    When `tokenizer.json` cannot be renumbered (a BPE or Unigram model), nothing is changed and `gives_artifact_ids` is
    False:
    the app maps ids through the vocabulary map. A file with original ids that cannot be rewritten while the others
    are is removed (listed in `dropped`), so that no shipped file disagrees with the artifact."""
    folder = Path(folder)
    new_ids = {old: new for new, old in enumerate(vocabulary.kept_ids)}
    unknown = new_ids[vocabulary.unk_id]
    result = TokenizerRewrite()
    fast = folder / "tokenizer.json"
    if fast.is_file():
        data = json.loads(fast.read_text(encoding="utf-8"))
        kind = (data.get("model") or {}).get("type")
        if kind not in RENUMBERABLE_MODELS:
            result.note = (f"the tokenizer's {kind} model cannot be renumbered; map its ids through the vocabulary "
                           "map")
            return result
        write_text_atomic(fast, json.dumps(renumbered_tokenizer_json(data, new_ids, unknown), ensure_ascii=False))
        result.rewritten.append(fast.name)
    words = folder / "vocab.txt"
    if words.is_file():
        lines = words.read_text(encoding="utf-8").splitlines()
        if len(lines) >= vocabulary.original_size:
            write_text_atomic(words, "\n".join(lines[old] for old in vocabulary.kept_ids) + "\n")
            result.rewritten.append(words.name)
        else:  # added tokens past its lines: their strings are elsewhere; do not ship a file that disagrees
            words.unlink()
            result.dropped.append(words.name)
    for name in ("tokenizer_config.json", "added_tokens.json"):
        path = folder / name
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            renumbered = _renumber_config(data, new_ids) if name == "tokenizer_config.json" else \
                {token: new_ids[old] for token, old in data.items() if old in new_ids}
            if renumbered != data:
                write_json_atomic(path, renumbered)
                result.rewritten.append(name)
            else:
                result.unchanged.append(name)
    result.gives_artifact_ids = bool(result.rewritten)
    if fast.is_file():
        result.note = ("tokenizer.json splits text as the original tokenizer did and gives the artifact's ids (a "
                       "token outside the trimmed vocabulary gives the unknown token's id)")
    if "vocab.txt" in result.rewritten:
        result.note += ("; " if result.note else "") + ("vocab.txt lists the kept tokens in artifact-id order (a "
                                                        "word with a piece the data never showed may split "
                                                        "differently in a WordPiece tokenizer built from it)")
    return result


def renumbered_tokenizer_json(data: dict[str, Any], new_ids: dict[int, int], unknown: int) -> dict[str, Any]:
    """A tokenizer.json (WordPiece / WordLevel model) whose ids are the artifact's: the same token table with kept
    tokens at their new ids and every other token at the unknown token's new id."""
    data = json.loads(json.dumps(data))  # a deep copy
    model = data["model"]
    model["vocab"] = {token: new_ids.get(old, unknown) for token, old in model["vocab"].items()}
    for token in data.get("added_tokens") or []:
        token["id"] = new_ids.get(token["id"], unknown)
    padding = data.get("padding")
    if isinstance(padding, dict) and "pad_id" in padding:
        padding["pad_id"] = new_ids.get(padding["pad_id"], unknown)
    if data.get("post_processor"):
        data["post_processor"] = _renumber_processor(data["post_processor"], new_ids, unknown)
    return data


def _renumber_processor(processor: dict[str, Any], new_ids: dict[int, int], unknown: int) -> dict[str, Any]:
    kind = processor.get("type")
    if kind == "Sequence":
        processor["processors"] = [_renumber_processor(p, new_ids, unknown) for p in processor["processors"]]
    elif kind == "TemplateProcessing":
        for special in processor.get("special_tokens", {}).values():
            special["ids"] = [new_ids.get(old, unknown) for old in special["ids"]]
    elif kind in ("BertProcessing", "RobertaProcessing"):
        for key in ("sep", "cls"):
            token, old = processor[key]
            processor[key] = [token, new_ids.get(old, unknown)]
    return processor


def _renumber_config(config: dict[str, Any], new_ids: dict[int, int]) -> dict[str, Any]:
    """tokenizer_config.json names added tokens by id (added_tokens_decoder); tokens the artifact lost are dropped."""
    decoder = config.get("added_tokens_decoder")
    if not isinstance(decoder, dict):
        return config
    return {**config, "added_tokens_decoder": {str(new_ids[int(old)]): token for old, token in decoder.items()
                                               if int(old) in new_ids}}
