"""Library log chatter that buries the line a user needs, quieted once for every entry point.

torchao (the fp8 extra) is imported by transformers whenever it is installed, and on a machine
without its GPU kernels logs each one it cannot load, and torch's pytree deprecations, to stderr.
"""

from __future__ import annotations

import contextlib
import logging

CHATTY = ("torchao", "torch.utils._pytree")   # the exported scripts quiet them too


def quiet_library_logs():
    """Only errors from the chatty libraries' loggers (set before they are imported)."""
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def library_logs_quieted():
    """Only errors from the chatty libraries' loggers for a while (torchao loaded where no
    entry point quieted them: a test, a benchmark, the window's engine), as they were after."""
    quiet = [logging.getLogger(name) for name in CHATTY]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
