"""Sessions: the spec plus the last findings and benchmark figures, saved and reopened.

A session file is JSON: `{"fp16studio_session": 1, "version", "saved_at", "spec", "diagnosis",
"bench"}`. `PipelineSpec.load` reads the same file and takes its spec, so every command that takes
a SPEC also takes a session. Saving never loses the previous file: it is kept as `NAME.bak`, and
the new text is written atomically. Recent files and the crash autosave live in the config
folder (`config_dir()`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from . import trust
from .errors import InputError
from .files import expand_user, keep_backup, read_text
from .spec import PipelineSpec, _remove_quietly, write_text_atomic

FORMAT = 1
SUFFIX = ".fp16studio"
# For file dialogs: sessions first, plain specs also open (without findings).
FILE_FILTER = f"fp16studio sessions (*{SUFFIX});;Pipeline specs (*.json *.toml);;All files (*)"
RECENT_LIMIT = 10
_RECENT = "recent.json"
_AUTOSAVE_STEM = "autosave"


@dataclass(frozen=True)
class Session:
    spec: PipelineSpec
    # The `diagnose --json` and `bench --json` documents of the last runs (CONTRACT §3).
    diagnosis: dict | None = None
    bench: dict | None = None
    # Where the session was read from or last saved to; after `restore_autosave`, the file the
    # user had open when the autosave was written (None for an unsaved session).
    path: Path | None = None
    saved_at: str | None = None

    def to_document(self, folder: Path) -> dict:
        """The JSON document, with the spec's relative paths made valid from `folder`."""
        return {
            "fp16studio_session": FORMAT,
            "version": __version__,
            "saved_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "spec": self.spec.rebased(folder).to_dict(),
            "diagnosis": self.diagnosis,
            "bench": self.bench,
        }


def save_session(session: Session, path: str | Path) -> Session:
    """Write the session to `path` (previous file kept as .bak); returns it with `path` set."""
    path = expand_user(path).absolute()
    document = session.to_document(path.parent)
    keep_backup(path)
    write_text_atomic(path, json.dumps(document, indent=2) + "\n")
    trust.trust(path, session.spec.rebased(path.parent))  # the app wrote it: the user's own
    add_recent(path)
    return replace(session, path=path, saved_at=document["saved_at"])


def open_session(path: str | Path) -> Session:
    """Read a session file, or a plain spec file (a session without findings)."""
    path = expand_user(path).absolute()
    session = _read(path)
    add_recent(path)
    return session


# -- autosave ------------------------------------------------------------------------------------
# One crash copy per window, named after the window's process and number: closing one window
# drops its own copy only, and a copy whose process is gone is what a crash left behind.
def autosave(session: Session, owner: str = "") -> None:
    """Write the crash-recovery copy of a window's session (the window calls this on edits);
    `owner` names the window (see autosave_owner)."""
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    document = session.to_document(folder)
    document["source"] = str(session.path) if session.path else None
    path = folder / _autosave_name(owner)
    write_text_atomic(path, json.dumps(document, indent=2) + "\n")
    trust.trust(path, session.spec.rebased(folder))


def autosave_owner(window: int) -> str:
    """The autosave name of this process's `window`-th window."""
    return f"{os.getpid()}-{window}"


def restore_autosave() -> Session | None:
    """The newest crash copy left by a window whose process is gone, or None when there is
    none or it cannot be read."""
    for path in sorted(_orphan_autosaves(), key=_mtime, reverse=True):
        try:
            session = _read(path)
            source = json.loads(path.read_text(encoding="utf-8")).get("source")
        except (InputError, OSError, ValueError):
            continue
        return replace(session, path=Path(source) if source else None)
    return None


def clear_autosave(owner: str = "") -> None:
    """Drop a window's crash copy (after it closed cleanly)."""
    _remove_quietly(config_dir() / _autosave_name(owner))


def clear_orphan_autosaves() -> None:
    """Drop the crash copies of windows that are gone (once the user chose whether to restore)."""
    for path in _orphan_autosaves():
        _remove_quietly(path)


def _autosave_name(owner: str) -> str:
    return f"{_AUTOSAVE_STEM}-{owner}{SUFFIX}" if owner else f"{_AUTOSAVE_STEM}{SUFFIX}"


def _orphan_autosaves() -> list[Path]:
    found = []
    for path in config_dir().glob(f"{_AUTOSAVE_STEM}*{SUFFIX}"):
        pid = path.stem.removeprefix(_AUTOSAVE_STEM).lstrip("-").partition("-")[0]
        if not (pid.isdigit() and _process_alive(int(pid))):
            found.append(path)
    return found


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:      # someone else's process: alive
        return True
    return True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def recent_files() -> list[Path]:
    """Recently opened or saved files, newest first, those that still exist."""
    return [path for path in _read_recent() if path.is_file()]


def add_recent(path: str | Path) -> None:
    path = expand_user(path).absolute()
    entries = [path] + [p for p in _read_recent() if p != path]
    folder = config_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps([str(p) for p in entries[:RECENT_LIMIT]], indent=2) + "\n"
        write_text_atomic(folder / _RECENT, text)
    except (OSError, InputError):
        pass  # a read-only config folder must not stop the user's save or open


def _read_recent() -> list[Path]:
    try:
        entries = json.loads((config_dir() / _RECENT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # missing or damaged: start a new list rather than fail the user's action
    if not isinstance(entries, list):
        return []
    return [Path(entry) for entry in entries if isinstance(entry, str)]


def config_dir() -> Path:
    """$FP16STUDIO_CONFIG_DIR, else the platform's per-user config folder + /fp16studio."""
    override = os.environ.get("FP16STUDIO_CONFIG_DIR")
    if override:
        return Path(override).expanduser()
    if sys.platform == "win32" and os.environ.get("APPDATA"):
        return Path(os.environ["APPDATA"]) / "fp16studio"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "fp16studio"
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    # The XDG spec says to ignore a relative value.
    return (Path(base) if os.path.isabs(base) else Path.home() / ".config") / "fp16studio"


# -- helpers -------------------------------------------------------------------------------------
def check_format(data: dict, path: Path) -> None:
    """Refuse a session document of a format this version does not read."""
    if data["fp16studio_session"] != FORMAT:
        raise InputError(f"{path}: session format {data['fp16studio_session']!r} is not supported "
                         f"by this version (it reads format {FORMAT})")


def _read(path: Path) -> Session:
    text = read_text(path, "session")
    try:
        data = json.loads(text) if path.suffix != ".toml" else None
    except (ValueError, RecursionError) as exc:
        reason = exc if isinstance(exc, ValueError) else "nested too deeply"
        raise InputError(f"{path}: not a session or spec file ({reason})") from None
    if not (isinstance(data, dict) and "fp16studio_session" in data):
        return Session(spec=PipelineSpec.load(path), path=path)
    check_format(data, path)
    try:
        spec = PipelineSpec.from_dict(data.get("spec"), base_dir=path.parent)
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    return Session(spec=spec, diagnosis=_object_or_none(data, "diagnosis", path),
                   bench=_object_or_none(data, "bench", path), path=path,
                   saved_at=data.get("saved_at"))


def _object_or_none(data: dict, key: str, path: Path) -> dict | None:
    value = data.get(key)
    if value is not None and not isinstance(value, dict):
        raise InputError(f"{path}: {key!r} should be an object or null")
    return value
