"""Model locations: a local folder, or the id of a Hugging Face model already in the local Hugging Face cache.

An id (`org/name`) resolves offline to its snapshot in the cache (`HF_HUB_CACHE`, by default
~/.cache/huggingface/hub, as huggingface_hub lays it out: models--org--name/snapshots/<revision>/ with refs/main
naming the revision). edgeprune never downloads a model: one that is not there is a one-line error naming the cache.
"""

import os
from pathlib import Path

from edgeprune.errors import UserInputError


def hub_cache() -> Path:
    """The Hugging Face cache folder: HF_HUB_CACHE as it is set now, else the one huggingface_hub resolved at import
    (from HF_HOME, XDG_CACHE_HOME, ...)."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)


def model_folder(location: str | Path, hint: str = "") -> Path:
    """The folder of model `location`: the folder itself, or the cached snapshot of the Hugging Face model id.

    Refuses (UserInputError) a file, a path that does not exist and an id that is not in the local cache; `hint`
    ends those messages. Nothing is downloaded."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    from edgeprune.plugins import FAMILIES_GROUP, load_plugins

    # a model family's plugin may register its architecture with transformers (AutoConfig.register) as it is
    # imported: load the families before any folder is read
    load_plugins(FAMILIES_GROUP)
    path = Path(location)
    if path.is_dir():
        return path
    text = str(location)
    suffix = f"; {hint}" if hint else ""
    if path.exists():
        raise UserInputError(f"model path {text} is a file, not a folder{suffix}")
    try:
        validate_repo_id(text)
    except HFValidationError:
        raise UserInputError(f"model path {text} does not exist: it is not a folder, nor a Hugging Face model "
                             f"id{suffix}") from None
    cache = hub_cache()
    try:
        return Path(snapshot_download(text, cache_dir=cache, local_files_only=True))
    except (OSError, ValueError):  # LocalEntryNotFoundError (an OSError): no snapshot of that revision there
        raise UserInputError(f"model {text} does not exist: it is not a folder, and the Hugging Face model {text} is "
                             f"not in the local cache {cache} (edgeprune looks offline; download it first, e.g. `hf "
                             f"download {text}`, or point HF_HUB_CACHE at the cache holding it){suffix}") from None

