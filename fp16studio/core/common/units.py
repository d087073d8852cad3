"""How sizes read everywhere: the command line, the window, the report and the bench table."""

from __future__ import annotations


def format_bytes(count: float) -> str:
    """Binary units, as memory tools print them: '512 B', '4.6 KiB', '3.0 GiB'."""
    if abs(count) < 1024:
        return f"{count:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024
        if abs(count) < 1024 or unit == "TiB":
            break
    return f"{count:.1f} {unit}"
