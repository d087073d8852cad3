"""The user's own preprocess function (`preprocess: "file.py:function"`), loaded from their file."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

from ..common.errors import InputError, first_line
from ..common.files import read_bytes, regular_file
from ..spec import trust
from ..spec.value import PipelineSpec


def load_user_function(spec: PipelineSpec):
    """The user's preprocess function, imported from their own .py file (never an installed
    module), wrapped so that its `sys.exit()` is a failure of the pipeline, not of fp16studio."""
    path, name = preprocess_file(spec), spec.preprocess.rpartition(":")[2]
    source = read_bytes(path, "preprocess")  # read once: what runs is what was checked
    trust.check_agreed(path, source, "preprocess")
    module_name = f"fp16studio_user_{path.stem}"
    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    # Modules beside the file import as they do under `python file.py`, whichever way fp16studio
    # was started (consent covers the preprocess file itself, not what it imports).
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    try:
        sys.modules[module_name] = module  # so datasets can pickle/hash the function
        exec(compile(source, str(path), "exec"), module.__dict__)  # the consented bytes
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's file failed to import: bad input
        raise InputError(f"preprocess: {path.name} failed to import: "
                         f"{type(exc).__name__}: {first_line(exc)}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise InputError(f"preprocess: {path.name} has no function {name!r}")
    return _UserFunction(function, name)


class _UserFunction:
    """The user's function; a `sys.exit()` inside it becomes an ordinary exception, so the run
    reports it instead of the whole command exiting quietly (a silent pass in CI)."""

    def __init__(self, function, name: str):
        self.function, self.name = function, name

    def __call__(self, *args, **kwargs):
        try:
            return self.function(*args, **kwargs)
        except SystemExit as exc:
            raise RuntimeError(f"preprocess function {self.name!r} called sys.exit({exc.code!r})") from None


def preprocess_file(spec: PipelineSpec) -> Path:
    """The user's own .py file the spec's preprocess names: a regular file, and not part of the
    installed Python library (CONTRACT §6)."""
    path = regular_file(spec.resolve_path(spec.preprocess.rpartition(":")[0]), "preprocess")
    library = installed_library(path)
    if library:
        raise InputError(f"preprocess: {path} is part of the installed Python library "
                         f"({library}), not your own code; name a function in your own .py file")
    return path


def installed_library(path: Path) -> str | None:
    """The library folder (stdlib, site-packages) that holds `path`, or None for the user's own."""
    import site
    import sysconfig

    folders = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    folders.add(site.getusersitepackages())
    resolved = path.resolve()
    for folder in folders:
        folder = Path(folder).resolve()
        if folder == resolved or folder in resolved.parents:
            return str(folder)
    # Another interpreter's library (/usr/lib/python3.11, a venv's site-packages) is no more
    # the user's own code than this one's.
    for parent in resolved.parents:
        if parent.name in ("site-packages", "dist-packages") or (
                re.fullmatch(r"python3(\.\d+)?", parent.name) and parent.parent.name.startswith("lib")):
            return str(parent)
    return None
