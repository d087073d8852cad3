"""What of the Hugging Face Hub is already on this machine: read from its cache, never the network."""

from __future__ import annotations


def looks_like_repo_id(value: str) -> bool:
    parts = value.split("/")
    return 1 <= len(parts) <= 2 and all(parts) and not value.startswith((".", "~"))


def cached_snapshot(repo_id: str, repo_type: str, revision: str | None) -> str | None:
    """The local snapshot folder of a cached repo (named by the commit its revision resolves
    to), or None when it is not in the cache."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, repo_type=repo_type, revision=revision,
                                 local_files_only=True)
    except Exception:  # noqa: BLE001 - any miss or malformed cache entry: treat as not cached
        return None
