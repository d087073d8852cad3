"""A warning raised inside a wrapper of ours, on the script's behalf, shown where `python SCRIPT`
shows it.

Python places a warning at a frame: torch's C++ warnings at the innermost Python frame (under
trace, ours: the torch-function mode calls the script's operation, a cast wrapper calls the
cast), a `warnings.warn(..., stacklevel=N)` N frames out (one of them ours: our wrapper of
`torch.autocast.__init__`). Filters and the once-per-place registry then use that place. While
the script runs (`install`), every warning on its way to be shown passes `_show` (in place of
`warnings._showwarnmsg`, which Python calls for each one and a script's own `showwarning` or
`catch_warnings` leave alone): one placed at a frame of ours is taken off our module's registry
(so that it comes again next time) and raised again at the first frame outside fp16studio
outwards from there, with that module's registry and the filters as they are, so the script's
filters, its registry and its own showwarning see what they see without us. Others pass on.
Nothing per call: wrappers add no frame (the frame walks of core/script count on that).
"""

from __future__ import annotations

import sys
import warnings

from ..common.precision import is_ours

_previous = None   # warnings._showwarnmsg before install


def install():
    global _previous
    if _previous is None:
        _previous = warnings._showwarnmsg
        warnings._showwarnmsg = _show


def uninstall():
    global _previous
    if _previous is not None and warnings._showwarnmsg is _show:
        warnings._showwarnmsg = _previous
    _previous = None


def _show(msg):
    filename, lineno = msg.filename, msg.lineno
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_filename == filename
                                     and frame.f_lineno == lineno):
        frame = frame.f_back
    if frame is None or not is_ours(filename):
        _previous(msg)
        return
    message, category = msg.message, msg.category
    text = str(message)
    registry = frame.f_globals.get("__warningregistry__")
    if registry is not None:   # placed at ours: not remembered there
        registry.pop((text, category, lineno), None)
        registry.pop((text, category, 0), None)
    warnings.onceregistry.pop((text, category), None)
    while frame is not None and is_ours(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        _previous(msg)
        return
    module_globals = frame.f_globals
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=module_globals.get("__name__"),
                           registry=module_globals.setdefault("__warningregistry__", {}),
                           module_globals=module_globals)
