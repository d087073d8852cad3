"""The user's files: read only regular files, and never lose one when writing (CONTRACT §6).

A FIFO, a device (`/dev/zero`) or a folder given where a file belongs would block or never end;
they are refused before anything opens them. Outputs are regular files, never a link, pipe or
device (`-o /dev/stdout`), and never overwrite an input, replace a file of
another kind only with `--force`, and keep the replaced file as NAME.bak, never in place of a
NAME.bak of the user's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from .errors import InputError

# Specs, sessions and preprocess files are small; a bigger one is a mistake (or /dev/zero).
MAX_TEXT_BYTES = 16 * 1024 * 1024
# NAME.bak, NAME.1.bak, ...: the names tried for a backup beside backups of the user's own.
MAX_BACKUPS = 100


def regular_file(path: Path, what: str) -> Path:
    """`path` when it is an existing regular file, else an InputError naming what is wrong."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{what} {path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{what} {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{what} {path}: is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {path}: not a regular file (a pipe, socket or device)")
    return path


def read_bytes(path: Path, what: str, limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes."""
    regular_file(path, what)
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{what} {path}: larger than {limit // (1024 * 1024)} MiB; "
                         f"not a {what} file")
    return data


def read_text(path: Path, what: str) -> str:
    """A small regular file's text, which must be UTF-8."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def expand_user(path: str | Path) -> Path:
    """`~` and `~user` expanded; a `~user` with no home on this machine stays as written (it
    names nothing local), where pathlib would raise."""
    path = Path(path)
    try:
        return path.expanduser()
    except RuntimeError:
        return path


def check_output(path: str | Path, inputs: list[Path], is_own_kind, force: bool = False) -> Path:
    """The output path, once it is safe to write: not empty, not a folder, not one of `inputs`
    (files or folders the command reads), and, when a file is there already, one that
    `is_own_kind(path)` recognises as this command's kind of output (else `force` is needed)."""
    if not str(path).strip():
        raise InputError("output path is empty")
    path = expand_user(path)
    target = path.resolve()
    for source in inputs:
        source = source.resolve()
        if target == source or source in target.parents:
            raise InputError(f"output {path}: is an input of this command ({source}); "
                             "write somewhere else")
    if path.is_dir() or str(path).endswith(("/", "\\")):
        raise InputError(f"output {path}: is a folder; give a file name")
    if not path.parent.is_dir():
        raise InputError(f"output {path}: folder {path.parent} does not exist")
    _not_special(path)
    if path.exists() and not force:
        if path.stat().st_size and not is_own_kind(path):
            raise InputError(f"output {path}: exists and is not a file this command writes; "
                             "choose another name, or pass --force to replace it (kept as "
                             f"{path.name}.bak)")
    # The user's NAME.bak stays; the command refuses rather than keep the old file under
    # another name, which the one line it prints would not say.
    backup = path.with_name(path.name + ".bak")
    if path.is_file() and backup_path(path, is_own_kind) != backup:
        raise InputError(f"output {path}: {backup.name} holds a file fp16studio did not write "
                         f"(yours, or one --force kept) and the old {path.name} would replace it; "
                         "move it away, or choose another output name")
    return path


def _not_special(path: Path) -> None:
    """An output is written as a new regular file moved into place: a symbolic link there would
    be replaced (or, written through, its target: `-o /dev/stdout` as root replaces the system's
    /dev/stdout), a pipe or device would block or swallow it. Even --force does not."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"output {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(mode):
        raise InputError(f"output {path}: is a symbolic link (to {os.readlink(path)}); "
                         "give the path of a file, not of a link")
    if not stat.S_ISREG(mode):
        raise InputError(f"output {path}: not a regular file (a pipe, socket or device); "
                         "give the path of a file")


def starts_with(path: Path, marker: str, size: int = 4096) -> bool:
    """True when `marker` is in the first `size` bytes of the file (an output's own signature)."""
    try:
        with open(path, "rb") as handle:
            return marker.encode() in handle.read(size)
    except OSError:
        return False


def backup_path(path: Path, is_own_kind) -> Path:
    """Where the file at `path` is kept when it is replaced: NAME.bak, unless something is
    there that `is_own_kind` does not take for fp16studio's own kind of file (the user's own
    NAME.bak, or the user's file an earlier --force kept): then the first NAME.N.bak that is
    free or fp16studio's. Never a name that holds a file of the user's; but a copy the user made
    of an fp16studio file passes for fp16studio's (nothing records which backups it wrote)."""
    for number in range(MAX_BACKUPS):
        backup = path.with_name(f"{path.name}.{number}.bak" if number else f"{path.name}.bak")
        if not (backup.is_symlink() or backup.exists()) or (backup.is_file() and is_own_kind(backup)):
            return backup
    raise InputError(f"cannot keep a backup of {path}: {path.name}.bak to {path.name}."
                     f"{MAX_BACKUPS - 1}.bak are all there and none is fp16studio's")


def keep_backup(path: Path, backup: Path | None = None) -> None:
    """Keep the file about to be replaced as `backup` (itself replaced atomically): by default
    NAME.bak, which check_output made sure is free or fp16studio's (see backup_path)."""
    if not path.is_file():
        return
    try:
        with _temporary_beside(backup or path.with_name(path.name + ".bak")) as tmp:
            shutil.copy2(path, tmp)
    except OSError as exc:
        raise InputError(f"cannot keep a backup of {path}: {exc.strerror or exc}") from None


def keep_backup_when_replaced(path: Path) -> None:
    """Keep the file at `path` as NAME.bak (`keep_backup`) when its replacement is written
    whole, right before it moves into place: a command interrupted or failing before that
    leaves the old file as it was and no NAME.bak that would block the next --force."""
    _BACKUP_ON_REPLACE.add(path.resolve())


# The outputs whose old file is kept as NAME.bak when the new one moves into place.
_BACKUP_ON_REPLACE: set[Path] = set()


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step: a crash leaves the old file or the new one."""
    try:
        with _temporary_beside(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _temporary_beside(target: Path):
    """A fresh temporary file in `target`'s folder, moved onto `target` when the block ends.
    Its name is new (mkstemp), so no file of the user's is ever taken for it; on any error or
    interrupt it is removed."""
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(name)
    try:
        # mkstemp's file is private (0600): give it the mode of the file it replaces.
        os.chmod(handle, stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o644)
        os.close(handle)
        yield tmp
        if target.resolve() in _BACKUP_ON_REPLACE:   # the new file is whole: now the backup
            keep_backup(target)
            _BACKUP_ON_REPLACE.discard(target.resolve())
        tmp.replace(target)
    except BaseException:
        remove_quietly(tmp)
        raise


def remove_quietly(path: Path) -> None:
    """Clean up a temporary file without raising: on a read-only or full disk the clean-up
    itself can fail, and the error worth reporting is the one that came first."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass
