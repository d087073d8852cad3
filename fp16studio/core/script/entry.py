"""How the child process of `fp16studio trace` starts: as fp16studio's own entry point with a
reserved first argument, so that one command works from a source tree, an installed package
and the frozen program (whose `sys.executable` is the app itself, not a Python that takes -m):

    python -c BOOT <package folder> --fp16studio-trace-runner PIPE SCRIPT [ARGS...]
    <frozen fp16studio>             --fp16studio-trace-runner PIPE SCRIPT [ARGS...]

(`python` is this one, or the one given with --python.) Not `python -m`: that puts the working
folder first on the import path, where a `typing_extensions.py` or `fp16studio.py` of the
user's would be imported by our own start; `python SCRIPT` never imports from there.

fp16studio/__main__.py hands that argument to core/script/runner.py before the command line
is parsed. PIPE names the write end of a pipe of the child's own (core/common/frames.py), where
it sends frames (below: what each holds). `--check` in place of PIPE asks whether the interpreter can run
the tracer at all.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

RUNNER_ARG = "--fp16studio-trace-runner"   # no user types this: never a command or an option
CHECK_ARG = "--check"
# What the runner needs beside fp16studio itself (the interpreter given with --python).
NEEDS = ("torch", "transformers", "datasets")
MIN_PYTHON = (3, 10)
# `trace --steps N` reaches the runner through its environment: the arguments after SCRIPT are
# the script's own.
STEPS_ENV = "FP16STUDIO_TRACE_STEPS"
DEFAULT_STEPS = 2

# What the child sends over its pipe, in this order: {"started": true} once the tracer is in
# place (a child that ends without it never ran the script), then {"result": ScriptTrace's
# full document (the codec's, with its tree), "final": false} as each model's first pass ends
# (a script that ends its process itself still has its result), and {"result": ...,
# "final": true} at the end.

# First the working folder `-c` puts on the import path goes (`-P` semantics, on 3.10 too), so
# nothing is imported from it before the runner puts the script's own folder there. Then
# fp16studio from this installation's package folder (in the frozen build: the sources the
# bundle carries beside its archive), without putting that folder's parent on the path, where
# site-packages or the bundle's other libraries would shadow another interpreter's own torch
# (--python). Then the same entry as everywhere: fp16studio/__main__.py.
BOOT = """\
import sys
if not getattr(sys.flags, "safe_path", False):
    del sys.path[0]
if sys.version_info < {min_python}:
    sys.exit("it is Python %d.%d; fp16studio needs {min_text} or newer" % sys.version_info[:2])
import importlib.util, runpy
package = sys.argv.pop(1)
spec = importlib.util.spec_from_file_location(
    "fp16studio", package + "/__init__.py", submodule_search_locations=[package])
module = importlib.util.module_from_spec(spec)
sys.modules["fp16studio"] = module
spec.loader.exec_module(module)
runpy.run_module("fp16studio", run_name="__main__", alter_sys=True)
""".format(min_python=MIN_PYTHON, min_text="%d.%d" % MIN_PYTHON)


def frozen() -> bool:
    """A PyInstaller build: `sys.executable` is the app."""
    return bool(getattr(sys, "frozen", False))


def package_folder() -> Path:
    """The folder of the fp16studio package as source files (the frozen build collects them
    beside its archive: `module_collection_mode` in packaging/fp16studio.spec)."""
    return Path(__file__).resolve().parents[2]


def runner_command(python: str | None = None) -> list[str]:
    """The command that starts the runner: this program itself, or `python`'s boot."""
    if python is None and frozen():
        return [sys.executable, RUNNER_ARG]
    return [python or sys.executable, "-c", BOOT, str(package_folder()), RUNNER_ARG]


def restore_library_path(env) -> None:
    """In the frozen program, `env` (a dict, or os.environ) as the user had it. A PyInstaller
    bootloader may put the bundle's folder first on LD_LIBRARY_PATH (onefile builds do; the
    user's value is then in LD_LIBRARY_PATH_ORIG), where another Python's torch, or a program
    the script starts, would load the bundle's libraries. Untouched when it did not."""
    if not frozen():
        return
    if "LD_LIBRARY_PATH_ORIG" in env:
        env["LD_LIBRARY_PATH"] = env.pop("LD_LIBRARY_PATH_ORIG")
        return
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle and env.get("LD_LIBRARY_PATH", "").split(os.pathsep)[0] == bundle:
        del env["LD_LIBRARY_PATH"]


def users_environment(env: dict) -> dict:
    """What another interpreter (`--python`) gets from the frozen program: the user's library
    path, and none of the bundle's own settings (PyInstaller's _PYI_* variables, the Qt plugin
    folder its PySide6 hook sets), which would reach into the bundle from outside it."""
    env = dict(env)
    if not frozen():
        return env
    restore_library_path(env)
    bundle = getattr(sys, "_MEIPASS", None)
    for name, value in list(env.items()):
        if name.startswith("_PYI_") or (bundle and value.startswith(bundle)):
            del env[name]
    return env
