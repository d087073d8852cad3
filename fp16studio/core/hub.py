"""Where a model or dataset comes from: a local folder, or the Hugging Face cache, or the Hub.

Offline (HF_HUB_OFFLINE, or the Hub unreachable) we read the cache only, and a missing item is
one clear error that says what to download. Nothing here waits on the network for long.
"""

from __future__ import annotations

import os
import socket
import threading
from functools import lru_cache
from urllib.parse import urlparse

from .errors import InputError, first_line

REACH_TIMEOUT_S = 3.0
# Short timeouts for metadata and downloads: a hang is worse than a clear failure.
os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")


def offline_requested() -> bool:
    return any(os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"))


@lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """True if a TCP connection to the Hub opens within a few seconds.

    Name resolution has no timeout of its own, so the attempt runs in a daemon thread that we
    stop waiting for.
    """
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    result = []

    def attempt():
        try:
            socket.create_connection((host, 443), timeout=REACH_TIMEOUT_S).close()
            result.append(True)
        except OSError:
            result.append(False)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(REACH_TIMEOUT_S + 0.5)
    return bool(result and result[0])


def online() -> bool:
    return not offline_requested() and hub_reachable()


def looks_like_repo_id(value: str) -> bool:
    parts = value.split("/")
    return 1 <= len(parts) <= 2 and all(parts) and not value.startswith((".", "~"))


def cached_snapshot(repo_id: str, repo_type: str, revision: str | None) -> str | None:
    """The local snapshot folder of a cached repo, or None when it is not in the cache."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, repo_type=repo_type, revision=revision,
                                 local_files_only=True)
    except Exception:  # noqa: BLE001 - any miss or malformed cache entry: treat as not cached
        return None


def resolve_model_source(value: str, revision: str | None, trust_remote_code: bool) -> str:
    """A local folder for `value`: the cached snapshot, or a fresh download."""
    snapshot = _cached_or_reachable(value, "model", revision, "no such folder")
    if snapshot:
        return snapshot
    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]
    if trust_remote_code:
        patterns.append("*.py")
    return _download(value, "model", revision, patterns)


def resolve_dataset_source(value: str, revision: str | None = None) -> str | None:
    """The cached snapshot folder of a Hub dataset, or None to let `datasets` download it."""
    return _cached_or_reachable(value, "dataset", revision, "no such file or folder")


def _cached_or_reachable(value, repo_type, revision, not_local) -> str | None:
    """The cached snapshot; None when it is not cached but the Hub can be reached; else an
    InputError that says what to download."""
    if not looks_like_repo_id(value):
        raise InputError(f"{repo_type} {value!r}: {not_local}, and not a Hub id (org/name)")
    snapshot = cached_snapshot(value, repo_type, revision)
    if snapshot or online():
        return snapshot
    flag = "" if repo_type == "model" else f" --repo-type {repo_type}"
    raise InputError(f"{repo_type} {value!r} is not in the Hugging Face cache and the Hub cannot "
                     f"be reached; on a connected machine run: hf download {value}{flag}")


def _download(repo_id: str, repo_type: str, revision: str | None, patterns: list[str]) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        return snapshot_download(repo_id, repo_type=repo_type, revision=revision,
                                 allow_patterns=patterns)
    except RepositoryNotFoundError:
        raise InputError(f"{repo_type} {repo_id!r} was not found on the Hub (or it is private: "
                         f"log in with `hf auth login`)") from None
    except RevisionNotFoundError:
        raise InputError(f"{repo_type} {repo_id!r} has no revision {revision!r}") from None
    except (HfHubHTTPError, OSError) as exc:
        raise InputError(f"{repo_type} {repo_id!r} could not be downloaded: {first_line(exc)}") from None
