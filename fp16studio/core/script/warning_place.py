"""A warning raised inside a wrapper of ours, on the script's behalf, shown where `python SCRIPT`
shows it.

Python places a warning at a frame: torch's C++ warnings at the innermost Python frame (under
trace, ours: the torch-function mode calls the script's operation, a cast wrapper calls the
cast), a `warnings.warn(..., stacklevel=N)` N frames out (one of them ours: our wrapper of
`torch.autocast.__init__`). Filters and the once-per-place registry then use that place. While
`relocated` is on, `warnings.showwarning` is a catcher: a warning placed at one of our frames is
taken off our module's registry (so that it reaches the catcher again next time) and raised
again at the first frame outside fp16studio outwards from there, with that module's registry
and the filters as they are, so the script's filters, its registry and its own showwarning see
what they see without us. Other warnings pass through unchanged.
"""

from __future__ import annotations

import sys
import warnings

from ..common.precision import is_ours

_depth = 0
_previous = None   # the showwarning in place when the outermost `relocated` began


def _catch(message, category, filename, lineno, file=None, line=None):
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_filename == filename
                                     and frame.f_lineno == lineno):
        frame = frame.f_back
    if frame is None or not is_ours(filename):
        _previous(message, category, filename, lineno, file, line)
        return
    text = str(message)
    registry = frame.f_globals.get("__warningregistry__")
    if registry is not None:   # placed at ours: not remembered there
        registry.pop((text, category, lineno), None)
        registry.pop((text, category, 0), None)
    warnings.onceregistry.pop((text, category), None)
    while frame is not None and is_ours(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        _previous(message, category, filename, lineno, file, line)
        return
    module_globals = frame.f_globals
    warnings.warn_explicit(message, category, frame.f_code.co_filename, frame.f_lineno,
                           module=module_globals.get("__name__"),
                           registry=module_globals.setdefault("__warningregistry__", {}),
                           module_globals=module_globals)


class _Relocated:
    """`with relocated:` around a call of ours made on the script's behalf."""

    __slots__ = ()

    def __enter__(self):
        global _depth, _previous
        _depth += 1
        if _depth == 1:
            _previous = warnings.showwarning
            warnings.showwarning = _catch
        return self

    def __exit__(self, *exc):
        global _depth
        _depth -= 1
        if _depth == 0 and warnings.showwarning is _catch:
            warnings.showwarning = _previous
        return False


relocated = _Relocated()
