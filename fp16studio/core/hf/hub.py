"""Where a model or dataset comes from: a local folder, or the Hugging Face cache, or the Hub.

Offline (HF_HUB_OFFLINE, or the Hub unreachable) we read the cache only, and a missing item is
one clear error that says what to download. Nothing here waits on the network for long.
"""

from __future__ import annotations

import http.client
import os
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from ..common.errors import InputError, first_line
from ..common.hub_cache import cached_snapshot, looks_like_repo_id

# Bounded times for every Hub call (CONTRACT §6): the probe below, then each request's connect
# and read. huggingface_hub 1.x/2.x reads the two variables when it is imported; its shared
# client is also given these defaults (`bounded_http`), since its own default is no timeout.
PROBE_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
# How long a probe's verdict holds: a long-lived window process re-checks after this.
PROBE_TTL_S = 60.0
os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "5")
os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")

_probe = {"at": -PROBE_TTL_S, "state": None}
_probe_lock = threading.Lock()


def offline_requested() -> bool:
    return any(os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"))


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def hub_state() -> str:
    """"answers", "unreachable" (no connection: offline) or "silent" (a connection that never
    answers: a broken proxy or firewall), from one HTTP request bounded in total time."""
    with _probe_lock:
        if time.monotonic() - _probe["at"] < PROBE_TTL_S:
            return _probe["state"]
        state = _ask_hub(endpoint())
        _probe.update(at=time.monotonic(), state=state)
        return state


def _ask_hub(url: str) -> str:
    # Name resolution has no timeout of its own, so the request runs in a daemon thread that we
    # stop waiting for.
    parts = urlparse(url)
    result = []

    def attempt():
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = cls(parts.hostname, parts.port, timeout=PROBE_TIMEOUT_S)
        try:
            try:
                connection.connect()
            except OSError:
                result.append("unreachable")
                return
            connection.request("HEAD", (parts.path or "") + "/api/health")
            connection.getresponse()  # any status is an answer
            result.append("answers")
        except (OSError, http.client.HTTPException):
            result.append("silent")
        finally:
            connection.close()

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(2 * PROBE_TIMEOUT_S + 0.5)
    return result[0] if result else "silent"


def online() -> bool:
    """True when the Hub may be asked: not offline by request, and it answered the probe (a
    Hub that connects but does not answer is not online). Whoever asks it next does so with
    bounded timeouts."""
    if offline_requested() or hub_state() != "answers":
        return False
    bounded_http()
    return True


def hub_went_silent() -> bool:
    """True when a recent probe or request found the Hub connected but not answering."""
    with _probe_lock:
        return _probe["state"] == "silent" and time.monotonic() - _probe["at"] < PROBE_TTL_S


def silent_message() -> str:
    return (f"the Hugging Face Hub ({endpoint()}) did not answer in time; check the network or "
            "proxy, or set HF_HUB_OFFLINE=1 to use only what is in the local cache")


def bounded_http() -> None:
    """Make every request of huggingface_hub's shared client bounded: its default is no
    timeout, and some calls pass `timeout=None` explicitly, so the bound is set per request in
    the transport, where no caller can lift it."""
    global _bounded
    if _bounded:
        return
    import httpx2
    from huggingface_hub.utils import _http

    limits = {"connect": CONNECT_TIMEOUT_S, "read": READ_TIMEOUT_S, "write": READ_TIMEOUT_S,
              "pool": READ_TIMEOUT_S}

    class HubSilent(httpx2.TransportError):
        """Not one of the errors huggingface_hub retries: a silent Hub fails once, fast."""

    class BoundedTransport(httpx2.HTTPTransport):
        def handle_request(self, request):
            if hub_went_silent():
                raise HubSilent(silent_message(), request=request)
            asked = dict(request.extensions.get("timeout") or {})
            request.extensions["timeout"] = {
                key: limit if asked.get(key) is None else min(asked[key], limit)
                for key, limit in limits.items()}
            try:
                return super().handle_request(request)
            except httpx2.TimeoutException:
                # One unanswered request is enough: retries (up to minutes) would only wait more.
                with _probe_lock:
                    _probe.update(at=time.monotonic(), state="silent")
                raise

    def factory():
        # As huggingface_hub's default factory, with the bounded transport.
        return httpx2.Client(event_hooks={"request": [_http.hf_request_event_hook]},
                             follow_redirects=True, transport=BoundedTransport())

    _http.set_client_factory(factory)
    _bounded = True


_bounded = False


def resolve_model_source(value: str, revision: str | None, trust_remote_code: bool,
                         tried: Path | None = None) -> str:
    """A local folder for `value`: the cached snapshot, or a fresh download. `tried`: where
    `value` was looked for as a folder (named in the error when it is neither)."""
    snapshot = _cached_or_reachable(value, "model", revision, "folder", tried)
    if snapshot:
        return snapshot
    patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]
    if trust_remote_code:
        patterns.append("*.py")
    return _download(value, "model", revision, patterns)


def resolve_dataset_source(value: str, revision: str | None = None,
                           tried: Path | None = None) -> str | None:
    """The cached snapshot folder of a Hub dataset, or None to let `datasets` download it."""
    return _cached_or_reachable(value, "dataset", revision, "file or folder", tried)


def _cached_or_reachable(value, repo_type, revision, local_kind, tried) -> str | None:
    """The cached snapshot; None when it is not cached but the Hub can be reached; else an
    InputError that says what to download, and where `value` was looked for locally (a spec
    copied without its model folder has a relative path that names nothing here)."""
    where = f" at {tried}" if tried is not None else ""
    if not looks_like_repo_id(value):
        raise InputError(f"{repo_type} {value!r}: no such {local_kind}{where}, "
                         "and not a Hub id (org/name)")
    snapshot = cached_snapshot(value, repo_type, revision)
    if snapshot:
        return snapshot
    if online():
        return None
    nor = f" (nor a local {local_kind}{where})" if where else ""
    if not offline_requested() and hub_went_silent():
        raise InputError(f"{repo_type} {value!r} is not in the Hugging Face cache{nor}, and "
                         f"{silent_message()}")
    flag = "" if repo_type == "model" else f" --repo-type {repo_type}"
    raise InputError(f"{repo_type} {value!r} is not in the Hugging Face cache{nor} and the Hub "
                     f"cannot be reached; on a connected machine run: hf download {value}{flag}")


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
    except Exception as exc:  # network errors come in many types (httpx, hub, OSError)
        if hub_went_silent():
            raise InputError(f"{repo_type} {repo_id!r} could not be downloaded: "
                             f"{silent_message()}") from None
        if not isinstance(exc, (HfHubHTTPError, OSError)):
            raise
        raise InputError(f"{repo_type} {repo_id!r} could not be downloaded: {first_line(exc)}") from None
