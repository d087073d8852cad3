"""Consent before a spec or session runs code (CONTRACT §6), the way Jupyter trusts notebooks.

A spec runs code of two kinds: its `preprocess` function, and with `trust_remote_code` the
model's own Python files (`auto_map`). A spec or session read from a file runs either only when
the file's content, together with that code (the preprocess file; a local model folder's .py
files), is in the trust store: a list of SHA-256 digests in the config folder. A digest gets
there when the user says so (the CLI's `--trust`, the window's question) or when fp16studio
itself writes the file (a spec or session saved by the app, the demo): that is how "the user
wrote it" is known. Any change to the spec or the code gives a new digest, so a changed file is
asked about again. Specs built in memory (the window's form, the Python API) are the user's own
and need no consent.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..common.config_folder import config_list, update_config_list
from ..common.errors import InputError
from ..common.files import read_bytes
from .value import PipelineSpec

STORE = "trusted.json"
STORE_LIMIT = 2000  # newest digests kept; an old one forgotten only means one more question


class UntrustedCode(InputError):
    """A spec from a file would run code the user has not agreed to run."""


def runs_code(spec: PipelineSpec) -> bool:
    return bool(spec.preprocess or spec.trust_remote_code)


def consent_needed(path: str | Path, spec: PipelineSpec) -> str | None:
    """What would run without consent, in words for a question to the user; None when nothing
    would (no code, or this content was trusted before)."""
    if not runs_code(spec) or digest(path, spec) in _read_store():
        return None
    what = []
    if spec.preprocess:
        file, _, function = spec.preprocess.rpartition(":")
        what.append(f"the Python function {function!r} from {spec.resolve_path(file)}")
    if spec.trust_remote_code:
        local = spec.local_path(spec.model)
        what.append(f"the model's own code (trust_remote_code) from "
                    f"{local if local is not None else 'the Hub repository ' + repr(spec.model)}")
    return f"{Path(path).name} runs {' and '.join(what)}"


def require(path: str | Path, spec: PipelineSpec, grant: bool = False) -> None:
    """Record consent when `grant`, else raise UntrustedCode when the spec needs it. Either way
    the preprocess content agreed to is pinned for this process (`agreed_preprocess`)."""
    if grant:
        trust(path, spec)
    else:
        what = consent_needed(path, spec)
        if what:
            raise UntrustedCode(f"{what}, and this file has not been trusted: read that code, then "
                                "run again with --trust (remembered until the spec or the code changes)")
    if spec.preprocess:
        file = _preprocess_path(spec)
        _AGREED[str(file.resolve())] = hashlib.sha256(read_bytes(file, "preprocess")).hexdigest()


def agreed_preprocess(path: Path) -> str | None:
    """SHA-256 of the preprocess content consented to in this process, or None (a spec built in
    memory, which is the user's own): the file must still hold exactly that when it is run."""
    return _AGREED.get(str(path.resolve()))


# Preprocess file -> SHA-256 of the content `require` let run: a file swapped between the
# question and the import (the model loads in between) is refused, never run.
_AGREED: dict[str, str] = {}


def _preprocess_path(spec: PipelineSpec) -> Path:
    return spec.resolve_path(spec.preprocess.rpartition(":")[0])


def trust(path: str | Path, spec: PipelineSpec) -> bool:
    """Remember that the user agreed to run this content; False when nothing was recorded (no
    code to trust, a preprocess file that is not there, a config folder that cannot be written:
    the consent still holds for this run, it is just asked for again next time)."""
    if not runs_code(spec):
        return False
    try:
        key = digest(path, spec)
    except InputError:
        return False
    return update_config_list(STORE, lambda entries: ([e for e in entries if e != key] + [key])[-STORE_LIMIT:])


def digest(path: str | Path, spec: PipelineSpec) -> str:
    """SHA-256 of the spec/session file's bytes, its preprocess file's bytes, and with
    trust_remote_code a local model folder's .py files (names and bytes)."""
    hasher = hashlib.sha256(b"fp16studio-trust-1\0")
    hasher.update(read_bytes(Path(path), "spec"))
    if spec.preprocess:
        hasher.update(b"\0")
        hasher.update(read_bytes(_preprocess_path(spec), "preprocess"))
    local = spec.local_path(spec.model) if spec.trust_remote_code else None
    if local is not None and local.is_dir():
        for code in sorted(local.glob("*.py")):
            hasher.update(b"\0" + code.name.encode() + b"\0")
            hasher.update(read_bytes(code, "model code"))
    return hasher.hexdigest()


def _read_store() -> list[str]:
    # No store yet, or a damaged one: nothing is trusted, the user is asked again.
    return [entry for entry in config_list(STORE) if isinstance(entry, str)]
