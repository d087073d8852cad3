"""The `fp16studio` command: the same engine as the window, for remote GPU boxes and CI.

Exit codes (CONTRACT §3): 0 fine, 1 error findings / not fixed, 2 bad input (one line on stderr),
3 a bug of ours, 141 a closed stdout.
"""

from __future__ import annotations

import sys

from ..core.common.errors import InputError
from .commands import COMMANDS
from .parser import parse
from .process import BAD_INPUT, run
from .remote import run_on_host, without_host


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    if args.install_desktop:
        return _install_desktop()
    if args.command in (None, "gui"):
        return _gui(getattr(args, "spec", None))
    if getattr(args, "host", None):
        sys.stdout.flush()
        return run_on_host(args, without_host(argv))
    if args.command == "engine":   # its stdout is the protocol's: no command wrapper around it
        return _engine(args)
    return run(COMMANDS[args.command], args)


def _engine(args) -> int:
    from ..engine import detached
    from ..engine.server import serve_stdio

    try:
        if args.serve_run:
            return detached.serve_run(args.serve_run)
        if args.attach:
            return detached.attach(args.attach, args.start_at)
    except InputError as exc:
        print(f"fp16studio: {exc}", file=sys.stderr)
        return BAD_INPUT
    return serve_stdio()


def _install_desktop() -> int:
    from ..desktop import install_desktop

    try:
        paths = install_desktop()
    except (OSError, InputError) as exc:
        print(f"fp16studio: cannot install the desktop entry: {exc}", file=sys.stderr)
        return BAD_INPUT
    for path in paths:
        print(f"installed {path}")
    return 0


def _gui(spec: str | None) -> int:
    from ..gui.app import main as gui_main

    return gui_main([spec] if spec else [])
