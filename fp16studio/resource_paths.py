"""Where the app's resources are: icons, stylesheets, app icons and desktop files.

They live in the repository's top-level resources/ folder. Building a wheel copies that folder
into the package as fp16studio/resources (packaging/setuptools_resources.py), and the PyInstaller
spec puts it at the same place in the frozen build; a source checkout or an editable install
reads the checkout's resources/ beside the package. Every other module finds its files here.

Qt-free: the desktop launcher (desktop.py) uses it as well as the window.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# First the copy inside the package (a wheel install, the frozen build), then the checkout's.
CANDIDATES = (PACKAGE / "resources", PACKAGE.parent / "resources")
# A file only this folder has, so an unrelated `resources` folder is never taken for it.
MARKER = Path("app", "fp16studio.svg")


@lru_cache(maxsize=1)
def resources_dir() -> Path:
    """The resources folder of this installation."""
    for folder in CANDIDATES:
        if (folder / MARKER).is_file():
            return folder
    raise FileNotFoundError("fp16studio's resources are missing; looked in "
                            + ", ".join(str(folder) for folder in CANDIDATES))


def resource(*parts: str) -> Path:
    return resources_dir().joinpath(*parts)


def icon_file(name: str) -> Path:
    """A line icon (SVG, drawn in `currentColor`)."""
    return resource("icons", f"{name}.svg")


def icon_files() -> list[Path]:
    return sorted(resource("icons").glob("*.svg"))


def stylesheet_file(scheme: str) -> Path:
    """The Qt stylesheet for "light" or "dark"; it says @RESOURCES@ for resources_dir()."""
    return resource(f"{scheme}.qss")


def app_icon_files() -> list[Path]:
    """The app icon: fp16studio-N.png for each pixel size, and the scalable fp16studio.svg."""
    folder = resource("app")
    return sorted(folder.glob("*.png")) + sorted(folder.glob("*.svg"))


def desktop_file(app_id: str, suffix: str) -> Path:
    """The freedesktop files for system packages: `.desktop` (the launcher) or `.metainfo.xml`."""
    return resource("desktop", f"{app_id}{suffix}")
