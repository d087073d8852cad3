"""The freedesktop launcher: the .desktop entry, and `fp16studio --install-desktop`.

The entry's text is rendered here, once; resources/desktop/ holds a copy for system packages, and a
test keeps the two identical. A user-level install writes to $XDG_DATA_HOME (~/.local/share):
applications/APP_ID.desktop and icons/hicolor/<size>/apps/APP_ID.{png,svg}.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
from pathlib import Path

from fp16studio import resource_paths

APP_ID = "io.github.fp16studio.fp16studio"

# Characters that force an Exec argument into double quotes (Desktop Entry spec, "Exec key").
_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


def desktop_entry(command: list[str] | None = None) -> str:
    """The .desktop text; `command` is the program and its leading arguments (default: on PATH)."""
    command = command or ["fp16studio"]
    exec_line = " ".join(_exec_arg(arg) for arg in command) + " gui %f"
    return "\n".join([
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.4",
        "Name=fp16studio",
        "GenericName=Half-Precision Debugger",
        "Comment=Find and fix FP16 and BF16 problems in Hugging Face pipelines",
        f"TryExec={_string_value(command[0])}",
        # %f: a SPEC or a saved session, when opened from a file manager.
        f"Exec={_string_value(exec_line)}",
        f"Icon={APP_ID}",
        "Terminal=false",
        "Categories=Development;Debugger;",
        "Keywords=fp16;bf16;half precision;mixed precision;dtype;PyTorch;transformers;Hugging Face;",
        "StartupNotify=true",
        "",
    ])


def launch_command() -> list[str]:
    """How this installation starts: the frozen app, the console script, or `python -m`."""
    if getattr(sys, "frozen", False):  # a PyInstaller build
        return [sys.executable]
    script = shutil.which("fp16studio")
    if script:
        return [str(Path(script).absolute())]
    return [sys.executable, "-m", "fp16studio"]


def install_desktop(data_home: str | Path | None = None) -> list[Path]:
    """Install the launcher and icons for the current user; returns the files written."""
    from fp16studio.core.common.files import write_text_atomic

    root = Path(data_home) if data_home else xdg_data_home()
    applications = root / "applications"
    applications.mkdir(parents=True, exist_ok=True)
    entry = applications / f"{APP_ID}.desktop"
    write_text_atomic(entry, desktop_entry(launch_command()))
    written = [entry]
    for source, size in app_icons():
        target = root / "icons" / "hicolor" / size / "apps" / f"{APP_ID}{source.suffix}"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        written.append(target)
    return written


def app_icons() -> list[tuple[Path, str]]:
    """(file, hicolor size folder) for each app icon: PNGs by their pixel size, SVG scalable."""
    files = resource_paths.app_icon_files()
    sized = sorted((png_size(path), path) for path in files if path.suffix == ".png")
    icons = [(path, f"{width}x{height}") for (width, height), path in sized]
    return icons + [(path, "scalable") for path in files if path.suffix == ".svg"]


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header (the IHDR chunk right after the signature)."""
    header = path.read_bytes()[:24]
    if header[:8] != b"\x89PNG\r\n\x1a\n" or header[12:16] != b"IHDR":
        raise ValueError(f"{path} is not a PNG file")
    return struct.unpack(">II", header[16:24])


def xdg_data_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or ""
    # The XDG spec says to ignore a relative value.
    return Path(base) if os.path.isabs(base) else Path.home() / ".local" / "share"


def _exec_arg(arg: str) -> str:
    """One Exec argument, quoted as the Desktop Entry spec asks (before the string escapes)."""
    arg = arg.replace("%", "%%")
    if _RESERVED.isdisjoint(arg):
        return arg
    return '"' + "".join("\\" + ch if ch in '"`$\\' else ch for ch in arg) + '"'


def _string_value(text: str) -> str:
    """The escapes of a Desktop Entry string value: backslash, newline, tab, carriage return."""
    return (text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
            .replace("\r", "\\r"))
