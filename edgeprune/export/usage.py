"""USAGE.md beside a shipped artifact: a short Python program that runs it with its runtime, written for the
artifact's model.json (the tests run it as written)."""

import json

from edgeprune.export.manifest import ModelManifest
from edgeprune.runtimes import RUNTIMES

USAGE_NAME = "USAGE.md"
EXAMPLE_TEXT = "The match ended in a draw after extra time."
EXAMPLE_PROMPT = "The bank said"
NEW_TOKENS = 32  # tokens the generator's snippet continues its prompt by
MAX_PRINTED_VALUES = 1024  # outputs up to this many values are printed in full, larger ones as shape and argmax


def usage_markdown(manifest: ModelManifest, labels_file: str | None = None) -> str:
    """The page: what the files are, then the program (run it in this folder)."""
    tokenizer = manifest.tokenizer
    files = ", ".join(f"`{name}`" for name in manifest.files) or "none"
    lines = [
        f"# Running {manifest.artifact}",
        "",
        f"`{manifest.artifact}` is {RUNTIMES.get(manifest.runtime.name).title}, read here with "
        f"{manifest.runtime.package} {manifest.runtime.version}. `model.json` lists its inputs and outputs (name, "
        "shape, dtype), the operators and delegates it uses and its sha256. Files that ship with it: " + files + ".",
        "",
    ]
    if tokenizer is not None:
        lines += [("The tokenizer's ids are the artifact's: feed them in as they are." if tokenizer.gives_artifact_ids
                   else f"Map the tokenizer's ids through `{tokenizer.id_map}` before feeding them in."), ""]
    lines += ["Run in this folder (Python):", "", "```python", *python_program(manifest, labels_file), "```", ""]
    return "\n".join(lines)


def python_program(manifest: ModelManifest, labels_file: str | None = None) -> list[str]:
    """The snippet's lines: build the inputs, run the artifact, print the first output as JSON (a generator's:
    prefill a prompt, decode greedily, print the continuation)."""
    text = manifest.tokenizer is not None and manifest.tokenizer.gives_artifact_ids
    runtime = RUNTIMES.get(manifest.runtime.name)
    if manifest.generator is not None and runtime.usage_generator:
        return generator_program(manifest)
    lines = ["import json", "", "import numpy as np", *runtime.usage_imports]
    if text:
        lines += ["from transformers import AutoTokenizer"]
    lines += ["", 'spec = json.load(open("model.json"))']
    if text:
        lines += [
            'tokenizer = AutoTokenizer.from_pretrained(".")  # gives the artifact ids: no id map',
            'length = spec["inputs"][0]["shape"][-1]',
            f"texts = [{json.dumps(EXAMPLE_TEXT)}]",
            'tokens = tokenizer(texts, padding="max_length", truncation=True, max_length=length,',
            '                   return_tensors="np")',
            'arrays = {i["name"]: tokens[i["name"]].astype(i["dtype"]) for i in spec["inputs"]}',
        ]
    else:
        lines += ['# replace with your preprocessed inputs: one array per entry of spec["inputs"]',
                  'arrays = {i["name"]: np.zeros(i["shape"], dtype=i["dtype"]) for i in spec["inputs"]}']
    lines += runtime.usage_run
    if manifest.outputs and manifest.outputs[0].quantization is not None:
        lines += ['scale, zero_point = spec["outputs"][0]["quantization"]  # an integer output of real values',
                  "first = (first.astype(np.float32) - zero_point) * scale"]
    name = manifest.outputs[0].name if manifest.outputs else "output"
    size = 1
    for dimension in (manifest.outputs[0].shape if manifest.outputs else []):
        size *= dimension
    lines += [f'result = {{"output": {json.dumps(name)}, "shape": list(first.shape),',
              '          "argmax": int(first.argmax())}']
    if size <= MAX_PRINTED_VALUES:
        lines += ['result["values"] = first.flatten().tolist()']
    if labels_file is not None:
        lines += [f'result["label"] = json.load(open({json.dumps(labels_file)}))["labels"][int(first.argmax())]']
    lines += ["print(json.dumps(result))"]
    return lines


def generator_program(manifest: ModelManifest) -> list[str]:
    """Prefill the prompt a chunk of `max_seq_len` at a time, then decode one token at a time against the program's
    own KV cache, greedily, until an end-of-sequence id, NEW_TOKENS tokens or the context's end."""
    runtime = RUNTIMES.get(manifest.runtime.name)
    kernels = list(runtime.usage_llm_kernels) if manifest.generator.attention == "fast" else []
    tokenizer = manifest.tokenizer is not None and manifest.tokenizer.gives_artifact_ids
    numpy = ["import numpy as np"] if any("np." in line for line in runtime.usage_generator) else []
    lines = ["import json", "", *numpy, *runtime.usage_imports, *kernels]
    if tokenizer:
        lines += ["from transformers import AutoTokenizer"]
    lines += ["", 'spec = json.load(open("model.json"))', 'generator = spec["generator"]', *runtime.usage_generator]
    if tokenizer:
        lines += ['tokenizer = AutoTokenizer.from_pretrained(".")',
                  f'prompt = tokenizer({json.dumps(EXAMPLE_PROMPT)}, add_special_tokens=False)["input_ids"]']
    else:
        lines += ["prompt = [1, 2, 3]  # replace with your prompt's token ids"]
    lines += [
        'chunk = generator["max_seq_len"]',
        "for start in range(0, len(prompt), chunk):  # prefill",
        "    logits = forward(prompt[start:start + chunk], start)",
        "tokens, position = [], len(prompt)",
        f'while len(tokens) < {NEW_TOKENS} and position < generator["context"]:  # greedy decode',
        "    token = int(logits[0, -1].argmax())",
        '    if token in generator["eos_ids"]:',
        "        break",
        "    tokens.append(token)",
        "    logits = forward([token], position)",
        "    position += 1",
        'result = {"prompt_tokens": len(prompt), "tokens": tokens}',
    ]
    if tokenizer:
        lines += ['result["text"] = tokenizer.decode(tokens)']
    return [*lines, "print(json.dumps(result))"]
