"""Other processes, by pid: whether one is still running, and signalling a process group."""

from __future__ import annotations

import os
from pathlib import Path


def process_alive(pid) -> bool:
    """Whether `pid` (an int) is a running process: someone else's counts, a zombie (ended, not
    yet reaped by its parent) does not."""
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):   # no /proc (macOS): alive, as kill said
        return True


def signal_group(pid: int, sig) -> None:
    """Send `sig` to the process group `pid` leads (a child started in a session of its own,
    with the helpers it started), if it is still there."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
