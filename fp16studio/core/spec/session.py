"""The user's sessions: Save and Open (the previous file kept as NAME.bak), the recent files,
and each window's crash copy, all in the config folder (`config_dir()`). The documents
themselves are read and written by `documents`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ..common.config_folder import config_dir, config_list, update_config_list
from ..common.errors import InputError
from ..common.files import backup_path, expand_user, keep_backup, remove_quietly
from ..common.processes import process_alive
from .documents import Session, is_session_file, read_session, write_session

SUFFIX = ".fp16studio"
# For file dialogs: sessions first, plain specs also open (without findings).
FILE_FILTER = f"fp16studio sessions (*{SUFFIX});;Pipeline specs (*.json *.toml);;All files (*)"
RECENT_LIMIT = 10
_RECENT = "recent.json"
_AUTOSAVE_STEM = "autosave"


def save_session(session: Session, path: str | Path) -> Session:
    """Write the session to `path`; returns it with `path` set, and `kept_as`: where the file
    that was there is kept (NAME.bak, or NAME.N.bak when a NAME.bak of the user's is there)."""
    path = expand_user(path).absolute()
    kept_as = backup_path(path, is_session_file) if path.is_file() else None
    keep_backup(path, kept_as)
    saved_at = write_session(session, path)
    add_recent(path)
    return replace(session, path=path, saved_at=saved_at, kept_as=kept_as)


def open_session(path: str | Path) -> Session:
    """Read a session file, or a plain spec file (a session without findings)."""
    path = expand_user(path).absolute()
    session, _ = read_session(path)
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
    write_session(session, folder / _autosave_name(owner),
                  source=str(session.path) if session.path else None)


def autosave_owner(window: int) -> str:
    """The autosave name of this process's `window`-th window."""
    return f"{os.getpid()}-{window}"


def restore_autosave() -> Session | None:
    """The newest crash copy left by a window whose process is gone, or None when there is
    none or it cannot be read."""
    for path in sorted(_orphan_autosaves(), key=_mtime, reverse=True):
        try:
            session, document = read_session(path)
        except InputError:
            continue
        source = document.get("source")
        return replace(session, path=Path(source) if isinstance(source, str) else None)
    return None


def clear_autosave(owner: str = "") -> None:
    """Drop a window's crash copy (after it closed cleanly)."""
    remove_quietly(config_dir() / _autosave_name(owner))


def clear_orphan_autosaves() -> None:
    """Drop the crash copies of windows that are gone (once the user chose whether to restore)."""
    for path in _orphan_autosaves():
        remove_quietly(path)


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
    return pid == os.getpid() or process_alive(pid)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def recent_files() -> list[Path]:
    """Recently opened or saved files, newest first, those that still exist."""
    return [path for path in _read_recent() if path.is_file()]


def add_recent(path: str | Path) -> None:
    """Put `path` first in the recent list (a read-only config folder never stops the user's
    save or open: the list just stays as it was)."""
    entry = str(expand_user(path).absolute())
    update_config_list(_RECENT, lambda entries: ([entry] + [e for e in entries if e != entry])[:RECENT_LIMIT])


def _read_recent() -> list[Path]:
    # Missing or damaged: a new list starts rather than the user's action failing.
    return [Path(entry) for entry in config_list(_RECENT) if isinstance(entry, str)]
