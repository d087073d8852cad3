"""Exceptions the engine raises on purpose; everything else is a bug or a pipeline failure."""


class InputError(ValueError):
    """Bad input from the user: unreadable spec, unknown key, missing model or dataset.

    The command line prints the message as one line and exits 2; the window shows it.
    """


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
