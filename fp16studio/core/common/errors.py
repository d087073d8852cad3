"""Exceptions the engine raises on purpose; everything else is a bug or a pipeline failure."""

import errno
import os


class InputError(ValueError):
    """Bad input from the user: unreadable spec, unknown key, missing model or dataset.

    The command line prints the message as one line and exits 2; the window shows it.
    """


class PipelineFailure(Exception):
    """The user's pipeline itself failed at a stage (their code, their casts): a diagnosis result,
    not bad input (where no diagnosis reports it, the command line's exit 1). Carries the
    original exception."""

    def __init__(self, stage: str, exc: BaseException, facts: dict | None = None):
        super().__init__(f"{stage}: {exc}")
        self.stage = stage
        self.exc = exc
        self.facts = facts or {}


class DiskFull(InputError):
    """A file could not be written: the disk, a quota or a file-size limit is full. The user's
    to free, never a pipeline failure nor a bug: exit 2, "disk full", one line."""


# A full disk, quota or file-size limit (errno, or in a library's own words: safetensors reports
# it from Rust as text, "File too large" included).
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def disk_full(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from (a library's wrapper: datasets'
    cache writes), says that a file could not grow."""
    return any(e.errno in DISK_FULL_ERRNOS if isinstance(e, OSError) and e.errno is not None
               else any(os.strerror(code) in str(e) for code in DISK_FULL_ERRNOS)
               for e in _chain(exc))


def raise_if_disk_full(exc: BaseException) -> None:
    """Where a failure of the pipeline becomes a result (a diagnosis's error, a variant's): a
    full disk is not the pipeline's failure but DiskFull."""
    if disk_full(exc):
        what = next((f" ({e.filename})" for e in _chain(exc)
                     if isinstance(e, OSError) and e.filename), "")
        raise DiskFull(f"disk full: a file could not be written{what}: {first_line(exc)}") from None


def _chain(exc):
    """`exc` and what it was raised from (PipelineFailure carries its cause as `exc`)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__ or getattr(exc, "exc", None)


class Cancelled(Exception):
    """A long operation stopped because its cancel token was set."""


class CancelToken:
    """Cooperative cancel flag, checked by long operations between steps."""

    def __init__(self):
        self._cancelled = False

    def cancel(self):
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def check(self):
        if self._cancelled:
            raise Cancelled("cancelled")


def check_cancel(cancel: CancelToken | None):
    """Raise Cancelled if the (optional) token is set: long operations call it between steps."""
    if cancel is not None:
        cancel.check()


def report_progress(progress, stage: str, message: str):
    """Call the (optional) progress callback of a long operation."""
    if progress is not None:
        progress(stage, message)


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message: what a one-line error report shows."""
    lines = str(exc).strip().splitlines()
    return lines[0][:limit] if lines else type(exc).__name__
