"""A folder of the machine the engine runs on, listed for the window's Browse buttons: while the
engine runs on a box, the pickers choose the box's files (gui/remote_browser.py). A task the
window names ("module:function"); it reads names and sizes, never a file's content.

And a script sent from the window's machine (or `trace --host`'s), written there into a run
folder of its own once its SHA-256 is checked: what the window then traces is that copy."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from fp16studio.core.common.codec import Document
from fp16studio.core.common.errors import InputError
from fp16studio.core.common.files import expand_user

LIST_FOLDER_TASK = "fp16studio.engine.remote_files:list_folder"
RECEIVE_SCRIPT_TASK = "fp16studio.engine.remote_files:receive_script"
MAX_ENTRIES = 5000   # a folder of a million files is named, not sent


@dataclass(frozen=True)
class Entry(Document):
    name: str
    folder: bool
    size: int | None = None   # a file's bytes


@dataclass(frozen=True)
class FolderListing(Document):
    """A folder as that machine names it, its entries (folders first, then by name), and the
    places worth a shortcut there (its home, its Hugging Face cache)."""

    path: str
    parent: str | None
    entries: list[Entry] = field(default_factory=list)
    places: dict[str, str] = field(default_factory=dict)
    note: str = ""            # what was left out


def list_folder(path: str) -> FolderListing:
    """The folder `path` names (`~` and a relative path: from the home folder there); a file's
    path lists the folder it is in, so that Browse opens where the field points."""
    folder = expand_user(path or "~")
    if not folder.is_absolute():
        folder = Path.home() / folder
    if not folder.is_dir():
        if not folder.parent.is_dir():
            raise InputError(f"no such folder: {path}")
        folder = folder.parent
    folder = Path(os.path.abspath(folder))
    try:
        with os.scandir(folder) as found:
            scanned = list(found)
    except OSError as exc:
        raise InputError(f"cannot list {folder}: {exc.strerror or exc}") from None
    entries = [_entry(item) for item in scanned]
    entries.sort(key=lambda e: (not e.folder, e.name.lower(), e.name))
    note = ""
    if len(entries) > MAX_ENTRIES:
        note = f"the first {MAX_ENTRIES} of {len(entries)} entries"
        entries = entries[:MAX_ENTRIES]
    return FolderListing(str(folder), str(folder.parent) if folder.parent != folder else None,
                         entries, _places(), note)


def _entry(item: os.DirEntry) -> Entry:
    try:
        info = item.stat()   # through a link: a link to a folder is entered as one
    except OSError:          # a dangling link: shown, and not a folder
        return Entry(item.name, False)
    folder = stat.S_ISDIR(info.st_mode)
    return Entry(item.name, folder, None if folder else info.st_size)


def _places() -> dict[str, str]:
    from huggingface_hub import constants

    places = {"Home": str(Path.home())}
    if Path(constants.HF_HUB_CACHE).is_dir():
        places["Hugging Face cache"] = constants.HF_HUB_CACHE
    return places


def receive_script(name: str, content: str, digest: str) -> str:
    """The path here of the script `name` sent from another machine (`content`: its bytes in
    base64; `digest`: their SHA-256), written by `received`."""
    try:
        data = base64.b64decode(content, validate=True)
    except ValueError:
        raise InputError(f"{name} arrived damaged (not base64)") from None
    return str(received(name, data, digest))


def received(name: str, data: bytes, digest: str) -> Path:
    """`data` checked against its SHA-256 and written once as `name` in a run folder of its own,
    ~/.cache/fp16studio/runs/<digest>/ (the same content sent again lands on the same copy)."""
    if Path(name).name != name or name in ("", ".", ".."):
        raise InputError(f"not a script's name: {name!r}")
    if hashlib.sha256(data).hexdigest() != digest:
        raise InputError(f"{name} arrived damaged (its SHA-256 differs)")
    folder = Path.home() / ".cache" / "fp16studio" / "runs" / digest[:16]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if not path.exists():
        part = path.with_suffix(".part")
        part.write_bytes(data)
        os.replace(part, path)
    return path
