"""The per-user config folder and the small JSON lists kept there (trusted digests, recent files).

They are read as the user's own files are (a regular file of bounded size: a FIFO or /dev/zero
put there never blocks a run), a damaged list counts as empty (the user is asked again rather
than stopped), and a list is changed under a lock, so processes writing at once lose nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

from .errors import InputError
from .files import read_text, write_text_atomic

# How long a writer waits for another process's lock before writing anyway.
LOCK_WAIT_S = 10.0


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


def config_list(name: str) -> list:
    """The JSON list `name` in the config folder; [] when it is missing, damaged or no list."""
    try:
        entries = json.loads(read_text(config_dir() / name, name))
    except (InputError, ValueError, RecursionError):
        return []
    return entries if isinstance(entries, list) else []


def update_config_list(name: str, change) -> bool:
    """Replace the list `name` with `change(list)`, read and written under one lock; False when
    the config folder cannot be written (the caller goes on: it only means asking again)."""
    folder = config_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _locked(folder / f".{name}.lock"):
            write_text_atomic(folder / name, json.dumps(change(config_list(name)), indent=0) + "\n")
    except (OSError, InputError):
        return False
    return True


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on `path` (POSIX flock; elsewhere, none), waited for LOCK_WAIT_S at most."""
    try:
        import fcntl
    except ImportError:  # Windows: one user's processes rarely race there; write unlocked
        yield
        return
    handle = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break  # a stuck holder: better a rare lost entry than a run that never starts
                time.sleep(0.01)
        yield
    finally:
        os.close(handle)  # releases the lock
