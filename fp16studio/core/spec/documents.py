"""Spec and session documents: the one place that reads and writes them.

A spec is a JSON or TOML document of spec keys (CONTRACT §1). A session wraps one:
`{"fp16studio_session": 1, "version", "saved_at", "spec", "diagnosis", "bench"}`; every command
that takes a SPEC also takes a session (its spec is read). What fp16studio writes is trusted as
written (CONTRACT §6), so writing records the consent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ... import __version__
from ..common.codec import Document
from ..common.errors import InputError
from ..common.files import read_text, starts_with, write_text_atomic
from . import trust
from .value import PipelineSpec

FORMAT = 1
# No document fp16studio writes nests deeper than this. A deeper one (crafted) would exhaust the
# recursion of what walks it later (freezing the spec, showing a finding's evidence), so it is
# refused where it is read.
MAX_NESTING = 32


@dataclass(frozen=True)
class Session:
    spec: PipelineSpec
    # The `diagnose --json` and `bench --json` documents of the last runs (CONTRACT §3), as
    # the file holds them: the window reads them (session_state.read_saved), leaving out what
    # it cannot, so a damaged result never keeps the spec from opening.
    diagnosis: dict | None = None
    bench: dict | None = None
    # Where the session was read from or last saved to; after a crash copy is restored, the
    # file the user had open when it was written (None for an unsaved session).
    path: Path | None = None
    saved_at: str | None = None
    # Where the last save kept the file it replaced (NAME.bak, or NAME.N.bak beside a NAME.bak
    # of the user's); None when there was none.
    kept_as: Path | None = None
    # The host whose engine the session was made with, and the Python there (None: this
    # computer): the spec's paths are that machine's, so opening it offers that engine.
    host: str | None = None
    remote_python: str | None = None


@dataclass(frozen=True)
class SessionDocument(Document):
    """A session file as written (`.fp16studio`): the spec, and the last runs' documents."""

    # First in the file: is_session_file knows fp16studio's own files by it.
    fp16studio_session: int
    spec: PipelineSpec
    version: str
    saved_at: str | None = None
    # The `diagnose --json` (or `trace --json`) and `bench --json` documents, as they were
    # written; read leniently (session_state), so a damaged one never keeps the spec from opening.
    diagnosis: dict | None = None
    bench: dict | None = None
    # An autosave's: the file the window had open.
    source: str | None = None
    # The engine's host and the Python there (Session.host); absent: this computer. With a
    # host, `host_folder` is the folder there that the spec's relative paths are read from
    # (the spec's own, as the host read it), or null: the engine's working folder there.
    host: str | None = None
    remote_python: str | None = None
    host_folder: str | None = None


def load_spec(path: str | Path) -> PipelineSpec:
    """The spec of a .json/.toml spec file, or of a session file."""
    path = Path(path)
    data = _parse(read_text(path, "spec"), path)
    if _nested_too_deeply(data):
        raise InputError(f"spec {path}: nested too deeply to be a spec")
    if _is_session(data):
        _check_format(data, path)
        data = data.get("spec")
    try:
        return PipelineSpec.from_dict(data, base_dir=path.resolve().parent)
    except InputError as exc:
        raise InputError(f"spec {path}: {str(exc).removeprefix('spec: ')}") from None


def save_spec(spec: PipelineSpec, path: str | Path) -> None:
    """Write the spec as JSON, atomically so an interrupted save never loses the old file."""
    path = Path(path)
    rebased = spec.rebased(path.resolve().parent)
    write_text_atomic(path, json.dumps(rebased.to_dict(), indent=2) + "\n")
    trust.trust(path, rebased)  # written by fp16studio: the user's own from now on


def read_session(path: Path) -> tuple[Session, dict]:
    """A session file, or a plain spec file read as a session without findings; with the
    document's other keys (an autosave's `source`)."""
    text = read_text(path, "session")
    try:
        data = json.loads(text) if path.suffix.lower() != ".toml" else None
    except (ValueError, RecursionError) as exc:
        reason = exc if isinstance(exc, ValueError) else "nested too deeply"
        raise InputError(f"{path}: not a session or spec file ({reason})") from None
    if _nested_too_deeply(data):
        raise InputError(f"{path}: not a session or spec file (nested too deeply)")
    if not _is_session(data):
        return Session(spec=load_spec(path), path=path), {}
    _check_format(data, path)
    host = _text(data.get("host"))
    try:
        spec = PipelineSpec.from_dict(data.get("spec"), base_dir=_text(data.get("host_folder"))
                                      if host else path.parent)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    session = Session(spec=spec, diagnosis=data.get("diagnosis"), bench=data.get("bench"),
                      path=path, saved_at=data.get("saved_at"),
                      host=host, remote_python=_text(data.get("remote_python")))
    return session, data


def write_session(session: Session, path: Path, **extra) -> str:
    """Write the session document to `path` (this computer's spec paths made valid from its
    folder; a host's written as they are, with the folder there they are read from), with
    `extra` keys; returns the time it was saved at."""
    spec = session.spec.rebased(path.parent) if session.host is None else session.spec
    if session.host is not None:
        extra["host_folder"] = spec.base_dir
    document = SessionDocument(
        fp16studio_session=FORMAT, spec=spec, version=__version__,
        saved_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        diagnosis=session.diagnosis, bench=session.bench, host=session.host,
        remote_python=session.remote_python, **extra)
    write_text_atomic(path, json.dumps(document.to_json(), indent=2) + "\n")
    trust.trust(path, spec)  # the app wrote it: the user's own
    return document.saved_at


def _text(value) -> str | None:
    """A document's optional text (a crafted file's other value: none)."""
    return value if isinstance(value, str) and value else None


def _is_session(data) -> bool:
    return isinstance(data, dict) and "fp16studio_session" in data


def is_session_file(path: Path) -> bool:
    """A session document as write_session writes it, its format key first: fp16studio's own."""
    return starts_with(path, '{\n  "fp16studio_session"')


def _check_format(data: dict, path: Path) -> None:
    """Refuse a session document of a format this version does not read."""
    if data["fp16studio_session"] != FORMAT:
        raise InputError(f"{path}: session format {data['fp16studio_session']!r} is not supported "
                         f"by this version (it reads format {FORMAT})")


def _parse(raw: str, path: Path):
    if path.suffix.lower() == ".toml":
        import tomllib

        try:
            return tomllib.loads(raw)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"spec {path}: not valid TOML ({exc})") from None
        except RecursionError:
            raise InputError(f"spec {path}: nested too deeply to be a spec") from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"spec {path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise InputError(f"spec {path}: nested too deeply to be a spec") from None


def _nested_too_deeply(value, levels: int = MAX_NESTING) -> bool:
    if not isinstance(value, (dict, list)):
        return False
    return levels == 0 or any(_nested_too_deeply(item, levels - 1)
                              for item in (value.values() if isinstance(value, dict) else value))
