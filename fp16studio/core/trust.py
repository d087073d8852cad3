"""Consent before a spec or session runs code (CONTRACT §6), the way Jupyter trusts notebooks.

The only code a spec runs is its `preprocess` function (remote model code has its own
`trust_remote_code` key). A spec or session read from a file runs that function only when the
file's content, together with the preprocess file's content, is in the trust store: a list of
SHA-256 digests in the config folder. A digest gets there when the user says so (the CLI's
`--trust`, the window's question) or when fp16studio itself writes the file (a spec or session
saved by the app, the demo): that is how "the user wrote it" is known. Any change to either file
gives a new digest, so a changed file is asked about again. Specs built in memory (the window's
form, the Python API) are the user's own and need no consent.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .errors import InputError
from .spec import PipelineSpec

STORE = "trusted.json"
STORE_LIMIT = 2000  # newest digests kept; an old one forgotten only means one more question


class UntrustedCode(InputError):
    """A spec from a file would run code the user has not agreed to run."""


def consent_needed(path: str | Path, spec: PipelineSpec) -> str | None:
    """What would run without consent, in words for a question to the user; None when nothing
    would (no preprocess, or this content was trusted before)."""
    if not spec.preprocess or digest(path, spec) in _read_store():
        return None
    file, _, function = spec.preprocess.rpartition(":")
    return f"{Path(path).name} runs the Python function {function!r} from {spec.resolve_path(file)}"


def require(path: str | Path, spec: PipelineSpec, grant: bool = False) -> None:
    """Record consent when `grant`, else raise UntrustedCode when the spec needs it."""
    if grant:
        trust(path, spec)
        return
    what = consent_needed(path, spec)
    if what:
        raise UntrustedCode(f"{what}, and this file has not been trusted: read both files, then "
                            "run again with --trust (remembered until either file changes)")


def trust(path: str | Path, spec: PipelineSpec) -> bool:
    """Remember that the user agreed to run this content; False when nothing was recorded (no
    code to trust, a preprocess file that is not there, a config folder that cannot be written:
    the consent still holds for this run, it is just asked for again next time)."""
    if not spec.preprocess:
        return False
    try:
        key = digest(path, spec)
    except InputError:
        return False
    entries = [entry for entry in _read_store() if entry != key] + [key]
    from .session import config_dir
    from .spec import write_text_atomic

    folder = config_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / STORE, json.dumps(entries[-STORE_LIMIT:], indent=0) + "\n")
    except (OSError, InputError):
        return False
    return True


def digest(path: str | Path, spec: PipelineSpec) -> str:
    """SHA-256 of the spec/session file's bytes and of its preprocess file's bytes."""
    from .files import read_bytes

    hasher = hashlib.sha256(b"fp16studio-trust-1\0")
    hasher.update(read_bytes(Path(path), "spec"))
    if spec.preprocess:
        hasher.update(b"\0")
        hasher.update(read_bytes(spec.resolve_path(spec.preprocess.rpartition(":")[0]),
                                 "preprocess"))
    return hasher.hexdigest()


def _read_store() -> list[str]:
    from .session import config_dir

    try:
        entries = json.loads((config_dir() / STORE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # no store yet, or a damaged one: nothing is trusted, the user is asked again
    return [entry for entry in entries if isinstance(entry, str)] if isinstance(entries, list) else []
