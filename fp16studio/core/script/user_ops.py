"""The user's own tensor operations: what fails or loses values in half precision outside the
model's modules, after the forward, or inside a forward of the user's own (issue 20, part 3).

    preds = logits.numpy()                         # bfloat16: numpy has no such dtype
    cut = torch.quantile(scores, 0.9)              # float16: quantile takes float32/float64
    scores = scores.masked_fill(mask, -1e9)        # float16 holds +-65504: refused
    scores = torch.where(mask, scores, -1e9)       # float16: silently -inf
    loss = criterion(preds, targets)               # float64 targets: backward fails later

One torch-function mode (`torch.overrides.TorchFunctionMode`) sits on the script thread's mode
stack for the whole run, not a list of patched functions: every torch function and Tensor
method reaches it. It looks at the file of the calling frame (a dict look-up, cached per file by
UserCode's rules) and hands a call that the user's code did not make straight on. A call made by
the user's code runs inside a try: a failure is classified (its message, the half tensor among
the arguments) and raised again, the same object; a success that wrote a number the half dtype
cannot hold (it became inf) is noted. Nothing the script computes or raises changes, and the
mode's own frame is taken out of the traceback, so the script's traceback reads as under python.

Who made a call: the frame below the mode's, except that a Python function of torch that hands
itself to the mode (`F.softmax`, `Tensor.backward`, `Tensor.__array__`: torch/overrides.py's
`handle_torch_function`) was called by the frame two further up; a mode of someone else's above
ours was called by its caller; and the loss functions torch's loss modules (torch/nn/modules/
loss.py) call were called by the line that called the loss module.

A failure something handled (the script's own code, or a library's: its traceback starts there,
not above the script) is a warning: the script went on. torch.compile: while dynamo traces, the
mode steps aside (`torch.compiler.is_compiling()`), before it reads any frame.

Each user's call is also followed by the float32 shadow (core/script/shadow.py: where error
is born and where it lands); the lines whose error reaches what the script prints, compares or
steps with become the records the rules of core/diagnostics/rules/values.py word as
`precision-loss` (core/script/quiet.py), their fixes the lines rewritten here and proven on a
copy of the script (core/script/proof.py).

Cost: a library's call pays for the mode itself (torch's dispatch to Python, about 1 us a call)
plus a frame look-up and one dict hit; only the user's own calls are wrapped and inspected.
"""

from __future__ import annotations

import ast
import io
import linecache
import os
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace as Record

from ..diagnostics.report import RunError
from ..common.precision import (
    DEVICE_ERRORS,
    FP16_MAX,
    HALF_KERNEL_ERRORS,
    HALF_TORCH_NAMES,
    OUR_FOLDER,
)
from ..diagnostics.findings import Finding
from ..diagnostics.rules import as_the_script_went
from ..diagnostics.rules.batch import float64_targets
from ..diagnostics.rules.dtypes import user_half_unsupported
from ..diagnostics.rules.placement import made_on_other_device
from ..diagnostics.rules.ranges import user_overflowed, user_value_refused
from ..diagnostics.rules.values import precision_loss
from ..run.pristine import ours, unwrapped
from .quiet import LineFacts, quiet_records
from .rewrite import (assigned_in_place, augmented, cast_back, casts_to_float32, float_cast,
                      segment)
from .shadow import SINKS, ShadowCheck
from .tracer import UserCode
from .value_check import CASTS, CONSTANT

SHADOW_ENV = "FP16STUDIO_SHADOW"    # "0": no float32 shadow (what the shadow costs is measured so)
# What a frame's file is, for the mode: kinds, cached per file name.
_USER, _DISPATCH, _LOSS, _WRAPPER, _OTHER, _PASS = 1, 2, 3, 4, 5, 6
_DISPATCH_FILE = os.sep.join(("torch", "overrides.py"))
_LOSS_FILE = os.sep.join(("torch", "nn", "modules", "loss.py"))
_MODULE_FILE = os.sep.join(("torch", "nn", "modules", "module.py"))
_OURS = OUR_FOLDER
_HANDLER = "__torch_function__"
_RUNPY = os.sep + "runpy.py"

_NUMPY_ERRORS = re.compile(r"Got unsupported ScalarType (BFloat16|Half)")
_FLOAT_ONLY_ERRORS = re.compile(r"must be either float or double dtype")
_VALUE_ERRORS = re.compile(r"value cannot be converted to type (?:c10::)?(Half|BFloat16) "
                           r"without overflow")
_BACKWARD_DTYPE_ERRORS = re.compile(r"Found dtype Double but expected (Float|Half|BFloat16)")
# Operations that store a number as it is (else it is arithmetic: `x * 1e6`).
_WRITES = frozenset((
    "full", "full_like", "new_full", "fill", "fill_", "masked_fill", "masked_fill_", "where",
    "clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_max", "__setitem__", "tensor",
    "as_tensor", "scalar_tensor", "index_fill", "index_fill_", "pad", "constant_pad_nd",
    "nan_to_num", "nan_to_num_", "index_put", "index_put_"))
_DATA = ("tensor", "as_tensor")   # their numbers come in a list
# Factories that make a tensor on the default device unless told `device=`.
_FACTORIES = frozenset((
    "arange", "linspace", "logspace", "zeros", "ones", "full", "empty", "eye", "rand", "randn",
    "randint", "tensor", "as_tensor", "tril_indices", "triu_indices"))
_MADE = 64                   # the user's last factory tensors remembered (where each was made)
_MEETINGS = 8                # the last losses that met float64 targets, kept
_GRAPH_NODES = 200           # how far back the autograd graph is searched for the loss


@dataclass
class _Seen:
    """One finding in the making, at one line: the registry's rule that words it and the
    record it reads; `exc` (a failure) until the script is over."""

    code: str
    rule: object
    record: Record
    exc: BaseException | None = None

    @property
    def source(self) -> dict:
        return self.record.source


@dataclass
class _Meeting:
    """A loss the user's code called with float64 targets and lower-precision predictions."""

    source: dict
    loss: str
    target: str | None          # the variable of the user's frame that holds them
    predictions: str            # their dtype
    line: str


class UserOps:
    """The watcher (ScriptWatch protocol): `install()`, `uninstall()`, `findings()`."""

    def __init__(self, user: UserCode, shadow: bool = True):
        self.user = user
        self.errors: list[str] = []        # fp16studio's own failures (bugs), never the script's
        self._kinds: dict[str, int] = {}
        self._seen: dict[tuple, _Seen] = {}
        self._meetings: list[_Meeting] = []
        self._made: dict[int, tuple] = {}    # id(tensor) -> (weakref, func, source, line)
        self._shadow = ShadowCheck() if shadow else None
        self._lines: dict[tuple, LineFacts] = {}    # (file, line) -> its words and fixes
        self._mode = None

    # -- the ScriptWatch protocol -------------------------------------------------------------

    def install(self):
        self._mode = _mode_for(self)
        self._mode.__enter__()

    def uninstall(self):
        """Our mode off the stack, wherever it is now: modes the script entered and left on
        (`torch.set_default_device` puts one beneath all others) stay as they are."""
        from torch.overrides import _get_current_function_mode_stack, _pop_mode, _push_mode

        mode, self._mode = self._mode, None
        if self._shadow is not None:
            self._shadow.uninstall()     # the shadows go; what they found stays
        if mode is None or not any(m is mode for m in _get_current_function_mode_stack()):
            return
        above = []
        while True:
            top = _pop_mode()
            if top is mode:
                break
            above.append(top)
        for other in reversed(above):
            _push_mode(other)

    def findings(self, error: RunError | None = None) -> list[Finding]:
        out = []
        for seen in self._seen.values():
            if seen.exc is not None:     # read once: the traceback holds the script's frames
                seen.record.caught = self._caught(seen.exc)
                seen.exc = None
            out.append(as_the_script_went(seen.rule, seen.record))
        if self._shadow is None:
            return out
        said = {(f.source["file"], f.source["line"]) for f in out if f.source}
        # While the script runs (a snapshot of the result so far) nothing is proven yet.
        records = quiet_records(self._shadow, self._lines, said, self.user, error,
                                prove_fixes=self._mode is None)
        return out + precision_loss(records)

    @staticmethod
    def _caught(exc: BaseException) -> bool:
        """Whether something handled the failure (the user's code, or a library's): its
        traceback starts at the frame that caught it. One that ended the script starts above
        the script: in runpy, or fp16studio's runner."""
        tb = exc.__traceback__
        name = tb.tb_frame.f_code.co_filename if tb is not None else _OURS
        return not (name.startswith(_OURS) or name.endswith(_RUNPY))

    # -- who called --------------------------------------------------------------------------

    def _kind(self, filename: str) -> int:
        if self.user.owns(filename):
            kind = _USER
        elif filename.endswith(_DISPATCH_FILE):
            kind = _DISPATCH
        elif filename.endswith(_LOSS_FILE):
            kind = _LOSS
        elif filename.startswith(_OURS):
            kind = _WRAPPER
        elif filename.endswith(_MODULE_FILE):
            kind = _PASS
        else:
            kind = _OTHER
        self._kinds[filename] = kind
        return kind

    def _kind_of(self, frame) -> int:
        name = frame.f_code.co_filename
        return self._kinds.get(name) or self._kind(name)

    def caller(self, frame, kind: int):
        """The user's frame that made the call the mode got, or None when no user code made it
        (`frame`: the frame below the mode's, of `kind`)."""
        while frame is not None and frame.f_code.co_name == _HANDLER:  # a mode above ours
            frame = frame.f_back
            kind = self._kind_of(frame) if frame is not None else _OTHER
        if kind == _DISPATCH:  # handle_torch_function, called by torch's Python function
            frame = frame.f_back
            frame = frame.f_back if frame is not None else None
            if frame is None:
                return None
            kind = self._kind_of(frame)
        if kind == _LOSS:      # a loss module's forward: the line that called the module
            while frame is not None and kind in (_LOSS, _PASS, _WRAPPER):
                frame = frame.f_back
                kind = self._kind_of(frame) if frame is not None else _OTHER
        elif kind == _WRAPPER:  # ours: a wrapper (tracer's casts, steps' backward) the user
            frame = frame.f_back  # called, else fp16studio's own work (never the user's)
            kind = self._kind_of(frame) if frame is not None else _OTHER
        return frame if kind == _USER else None

    # -- a call of the user's ---------------------------------------------------------------

    def call(self, func, args, kwargs, frame):
        name = _func_name(func)
        pending = None
        shadow = self._shadow
        if shadow is not None and name not in SINKS:
            try:
                with ours:
                    pending = shadow.before(func, name, args, kwargs,
                                            (frame.f_code.co_filename, frame.f_lineno))
            except Exception as bug:  # noqa: BLE001 - ours must not change the script
                self.errors.append(f"{type(bug).__name__}: {bug}")
        try:
            result = func(*args, **kwargs)
        except Exception as exc:   # raised again as it is: the mode drops our frames
            try:
                with ours:
                    self._failed(name, args, kwargs, frame, exc)
            except Exception as bug:  # noqa: BLE001 - ours must not change the script
                self.errors.append(f"{type(bug).__name__}: {bug}")
            raise
        try:
            with ours:
                self._succeeded(name, args, kwargs, result, frame)
                if shadow is not None:
                    self._follow(shadow, pending, name, args, kwargs, result, frame)
        except Exception as bug:  # noqa: BLE001
            self.errors.append(f"{type(bug).__name__}: {bug}")
        return result

    def _follow(self, shadow, pending, name, args, kwargs, result, frame):
        """The shadow's part of a call: the result's shadow and what it lost, or the error
        carried to a place where values matter; the line's words and fixes once per kind."""
        where = (frame.f_code.co_filename, frame.f_lineno)
        if pending is not None:
            shadow.after(pending, result)
        elif name in SINKS and args:
            shadow.land(name, args[0], where)
        facts = self._lines.get(where)
        if facts is None:
            facts = self._lines[where] = LineFacts(_function_of(frame), _line(frame),
                                                   _source(frame))
        birth = shadow.births.get(where)
        if birth is not None:
            for kind in (*birth.events, "rounding"):
                if kind not in facts.fixes:
                    facts.fixes[kind] = _keeping_lines(facts.code, name, args, kwargs, kind,
                                                       birth, frame)

    def _succeeded(self, name, args, kwargs, result, frame):
        big = _big_number(args) or (_big_number(kwargs.values()) if kwargs else None)
        if big is None and name in _DATA:    # torch.tensor([1e5, ...]): numbers in a list
            big = _big_number(args, nested=True)
        if big is not None:
            self._wrote_inf(name, args, result, big, frame)
        if "loss" in name or "entropy" in name:
            self._loss_called(name, args, kwargs, frame)
        if name in _FACTORIES:
            self._remember_made(name, result, frame)

    def _failed(self, name, args, kwargs, frame, exc: Exception):
        message = str(exc).strip().split("\n", 1)[0][:500]
        half = _half_tensor(args, kwargs)
        if _NUMPY_ERRORS.search(message) and half is not None:
            self._unsupported(name, args, kwargs, half, frame, exc, message, numpy=True)
        elif (_FLOAT_ONLY_ERRORS.search(message) or HALF_KERNEL_ERRORS.search(message)) \
                and half is not None:
            self._unsupported(name, args, kwargs, half, frame, exc, message)
        elif match := _VALUE_ERRORS.search(message):
            self._refused_value(name, args, kwargs, HALF_TORCH_NAMES[match.group(1)], frame, exc,
                                message)
        elif DEVICE_ERRORS.search(message):
            self._met_on_other_device(args, kwargs, frame, exc, message)
        elif match := _BACKWARD_DTYPE_ERRORS.search(message):
            self._backward_dtype(args, frame, exc, message)

    # -- what each finding says ------------------------------------------------------------

    def _note(self, seen: _Seen):
        key = (seen.code, seen.source["file"], seen.source["line"])
        self._seen[key] = seen   # the latest at a line: it decides whether the script caught it

    def _unsupported(self, name, args, kwargs, tensor, frame, exc, message, numpy=False):
        dtype = _dtype_name(tensor.dtype)
        line = _line(frame)
        code, expr = _with_float(line, name, args, kwargs)
        expr = expr or _local_name(tensor, frame)
        if code is None:
            code = (f"{expr} = {expr}.float()" if expr else "# .float() the tensor") + \
                f"  # before {_shown(name)}: it takes no {dtype}"
        self._note(_Seen("half-unsupported", user_half_unsupported, Record(
            name=_shown(name), op=name, dtype=dtype, device=tensor.device.type, expr=expr,
            message=message, numpy=numpy, lineno=frame.f_lineno, code=code,
            source=_source(frame), location=expr or _function_of(frame)), exc))

    def _refused_value(self, name, args, kwargs, dtype, frame, exc, message):
        import torch

        limit = float(torch.finfo(getattr(torch, dtype)).max)
        value = _value_past(args, kwargs, limit)
        if value is None:
            return
        self._note(self._value_finding(name, args, kwargs, value, dtype, limit, frame, exc,
                                       "torch refuses it (" + message + ")", "error"))

    def _wrote_inf(self, name, args, result, big, frame):
        import torch

        if ("value-out-of-range", frame.f_code.co_filename, frame.f_lineno) in self._seen:
            return   # said once per line (a loop)
        target = result if isinstance(result, torch.Tensor) else (
            args[0] if args and isinstance(args[0], torch.Tensor) else None)
        if target is None or target.dtype not in (torch.float16, torch.bfloat16) \
                or target.device.type == "meta":
            return
        limit = float(torch.finfo(target.dtype).max)
        if abs(big) <= limit:
            return
        try:
            if not bool(torch.isinf(target).any()):
                return
        except Exception:  # noqa: BLE001 - a tensor whose values cannot be read (fake, sparse)
            return
        dtype = _dtype_name(target.dtype)
        if name in _WRITES:
            self._note(self._value_finding(name, args, {}, big, dtype, limit, frame, None,
                                           "it became inf, silently", "warning"))
            return
        half = _half_tensor(args, {})
        try:
            if half is not None and bool(torch.isinf(half).any()):
                return     # the inf was there before (a mask of -inf): not this step's
        except Exception:  # noqa: BLE001
            return
        self._note(self._overflowed(name, args, big, dtype, limit, frame))

    def _overflowed(self, name, args, value, dtype, limit, frame) -> _Seen:
        """Arithmetic with a number (`x * 1e6`) whose result passed the dtype's range."""
        line = _line(frame)
        half = _half_tensor(args, {})
        code, expr = _with_float(line, name, args, {})
        expr = expr or (_local_name(half, frame) if half is not None else None)
        if code is None:
            code = (f"{expr} = {expr}.float()" if expr else "# .float() the tensor") + \
                f"  # float32 before {_shown(name)}: {dtype} ends at {limit:g}"
        return _Seen("value-out-of-range", user_overflowed, Record(
            where=_function_of(frame), lineno=frame.f_lineno, name=_shown(name), op=name,
            value=value, dtype=dtype, limit=limit, code=code, source=_source(frame)))

    def _value_finding(self, name, args, kwargs, value, dtype, limit, frame, exc, outcome,
                       severity) -> _Seen:
        line = _line(frame)
        half = _half_tensor(args, kwargs)
        expr = _operand(line, name, args, half) or (
            _local_name(half, frame) if half is not None else None)
        bound = "min" if value < 0 else "max"
        replacement = f"torch.finfo({expr}.dtype).{bound}" if expr else \
            f"torch.finfo(torch.{dtype}).{bound}"
        code = _replace_number(line, value, replacement) or \
            f"{replacement}  # in place of {value:g}"
        return _Seen("value-out-of-range", user_value_refused, Record(
            where=_function_of(frame), lineno=frame.f_lineno, name=_shown(name), op=name,
            value=value, dtype=dtype, limit=limit, outcome=outcome, severity=severity,
            replacement=replacement, code=code, source=_source(frame)), exc)

    def _remember_made(self, name, result, frame):
        """Where the user's code made a tensor: said if it then meets one on another device."""
        import torch
        import weakref

        if not isinstance(result, torch.Tensor):
            return
        if len(self._made) >= _MADE:
            self._made.pop(next(iter(self._made)))
        self._made[id(result)] = (weakref.ref(result), name, _source(frame), _line(frame))

    def _met_on_other_device(self, args, kwargs, frame, exc, message):
        """A device clash in the user's code where one side is a tensor their code made: the
        fix is where it was made, not the batch."""
        import torch

        tensors = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
        for tensor in tensors:
            made = self._made.get(id(tensor))
            if made is None or made[0]() is not tensor:
                continue
            other = next((t for t in tensors if t.device != tensor.device), None)
            if other is None:
                return
            _, func, source, line = made
            self._note(_Seen("device-mismatch", made_on_other_device, Record(
                func=func, device=str(tensor.device), other_device=str(other.device),
                like=_local_name(other, frame) or "x", line=line, source=source,
                failed_at=_source(frame), message=message, function=_function_of(frame)), exc))
            return

    def _loss_called(self, name, args, kwargs, frame):
        import torch

        tensors = [a for a in args[:2] if isinstance(a, torch.Tensor)]
        target = kwargs.get("target")
        if isinstance(target, torch.Tensor):
            tensors.append(target)
        if len(tensors) < 2:
            return
        predictions, target = tensors[0], tensors[-1]
        if target.dtype != torch.float64 or predictions.dtype not in (
                torch.float32, torch.float16, torch.bfloat16):
            return
        meeting = _Meeting(_source(frame), name, _local_name(target, frame),
                           _dtype_name(predictions.dtype), _line(frame))
        self._meetings = [*self._meetings[-(_MEETINGS - 1):], meeting]

    def _backward_dtype(self, args, frame, exc, message):
        graph_loss = _float64_target_loss(args[0] if args else None)
        meeting = next((m for m in reversed(self._meetings) if graph_loss and
                        m.loss.replace("_", "") == graph_loss.lower()), None) or \
            (self._meetings[-1] if self._meetings else None)
        if meeting is None and graph_loss is None:
            return        # not shown to be the targets: no finding rather than a wrong one
        name = meeting.target if meeting and meeting.target else "targets"
        line = meeting.line if meeting else ""
        code = _replace_name(line, name, f"{name}.float()") or \
            f"{name} = {name}.float()  # float32, as the predictions: before the loss"
        self._note(_Seen("label-dtype", float64_targets, Record(
            name=name, loss=meeting.loss if meeting else graph_loss,
            predictions=meeting.predictions if meeting else "float32",
            source=meeting.source if meeting else _source(frame), backward=_source(frame),
            message=message, code=code), exc))


def _mode_for(watcher: UserOps):
    """The mode, its hot path on local names (this module imports without torch)."""
    import torch
    from torch.overrides import TorchFunctionMode

    compiling = torch.compiler.is_compiling
    getframe = sys._getframe
    kinds, kind_of, caller, call = watcher._kinds, watcher._kind, watcher.caller, watcher.call
    user, dispatch, other, handler, drop = _USER, _DISPATCH, _OTHER, _HANDLER, _drop_our_frame

    class UserOpsMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if kwargs is None:
                kwargs = {}
            func = unwrapped(func)   # torch's own, not what a script put in its place
            if compiling():   # dynamo traces this very function: nothing of ours in the graph
                return func(*args, **kwargs)
            try:
                frame = getframe(1)
            except ValueError:  # called from no Python frame at all
                return func(*args, **kwargs)
            code = frame.f_code
            kind = kinds.get(code.co_filename) or kind_of(code.co_filename)
            if kind == dispatch and code.co_name != handler:  # F.softmax: then F.softmax
                back = frame.f_back
                frame = back.f_back if back is not None else None
                if frame is None:
                    kind = other
                else:
                    code = frame.f_code
                    kind = kinds.get(code.co_filename) or kind_of(code.co_filename)
            if kind != user or code.co_name == handler:
                # Nearly every call: a library's. Else find who called through torch's own.
                frame = None if kind >= other and code.co_name != handler else \
                    caller(frame, kind)
            try:
                if frame is None:
                    return func(*args, **kwargs)
                return call(func, args, kwargs, frame)
            except BaseException as exc:
                drop(exc)
                raise

    return UserOpsMode()


def _drop_our_frame(exc: BaseException):
    """The exception's traceback without the mode's frames on top (a bare `raise` after this
    adds none): it reads as it would without fp16studio."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OURS) \
            and tb.tb_frame.f_code.co_name in (_HANDLER, "call"):
        tb = tb.tb_next
    exc.__traceback__ = tb


# -- reading the arguments (only for calls the user's code made) ------------------------------

def _big_number(values, nested=False):
    """The first finite Python number past float16's range, or None; `nested`: in a list or
    tuple too (else those are sizes)."""
    for value in values:
        kind = type(value)
        if kind is float or kind is int:
            if not -FP16_MAX <= value <= FP16_MAX and value == value and \
                    value not in (float("inf"), float("-inf")):
                return value
        elif nested and (kind is list or kind is tuple):
            found = _big_number(value, True) if len(value) < 64 else None
            if found is not None:
                return found
    return None


def _value_past(args, kwargs, limit: float):
    """The number among the arguments that the dtype (of max `limit`) cannot hold."""
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if value.dim() != 0 or value.is_floating_point() is False:
                continue
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and abs(value) > limit and abs(value) != float("inf"):
            return value
    return None


def _half_tensor(args, kwargs):
    import torch

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
            return value
    return None


def _float64_target_loss(loss) -> str | None:
    """The loss node (`HuberLoss`) in `loss`'s autograd graph that saved float64 targets."""
    import torch

    node = getattr(loss, "grad_fn", None)
    todo, seen = [node] if node is not None else [], 0
    while todo and seen < _GRAPH_NODES:
        node = todo.pop(0)
        seen += 1
        try:
            target = getattr(node, "_saved_target", None)
        except RuntimeError:     # freed
            target = None
        if isinstance(target, torch.Tensor) and target.dtype == torch.float64:
            return type(node).__name__.removesuffix("Backward0").removesuffix("Backward1")
        todo.extend(n for n, _ in getattr(node, "next_functions", ()) if n is not None)
    return None


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _func_name(func) -> str:
    return getattr(func, "__name__", None) or str(func)


# -- the user's line ---------------------------------------------------------------------------

def _source(frame) -> dict:
    return {"file": frame.f_code.co_filename, "line": frame.f_lineno}


def _line(frame) -> str:
    """The code on the frame's line, without its comment."""
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    if "#" in line:
        try:
            for token in tokenize.generate_tokens(io.StringIO(line).readline):
                if token.type == tokenize.COMMENT:
                    return line[:token.start[1]].rstrip()
        except (tokenize.TokenError, IndentationError, SyntaxError):
            pass
    return line


def _function_of(frame) -> str:
    """The function the line is in (`AttentionPooling.forward`), the file for top-level code."""
    code = frame.f_code
    if code.co_name == "<module>":
        return Path(code.co_filename).name
    qualname = getattr(code, "co_qualname", None)   # Python 3.11+
    if qualname is None:
        owner = frame.f_locals.get("self")
        qualname = f"{type(owner).__name__}.{code.co_name}" if owner is not None else code.co_name
    return qualname


_MODULES = ("torch", "np", "numpy", "F", "nn")   # `torch.quantile(x)`: x is no receiver
_NUMPY_CALLS = ("asarray", "array", "asanyarray")   # what calls Tensor.__array__
_NAMESPACES = ("linalg_", "fft_", "special_")       # torch.linalg.inv is `linalg_inv`


def _shown(name: str) -> str:
    return {"__array__": "numpy's asarray", "__setitem__": "an item assignment"}.get(name) or (
        f".{name}()" if name.endswith("_") or name == "numpy" else f"{name}()")


def _call_on(line: str, name: str):
    """The call of `name` on the line, and its operands in torch's order (a method's receiver
    first): None when the line does not parse alone or makes no such call."""
    names = _NUMPY_CALLS if name == "__array__" else (
        name, name.split("_", 1)[-1] if name.startswith(_NAMESPACES) else name)
    tree = _statement_tree(line)
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called not in names:
            continue
        root = func.value if isinstance(func, ast.Attribute) else None
        while isinstance(root, ast.Attribute):
            root = root.value
        method = isinstance(func, ast.Attribute) and not (
            isinstance(root, ast.Name) and root.id in _MODULES)
        return node, ([func.value] if method else []) + list(node.args)
    return None


def _with_float(line: str, name: str, args, kwargs) -> tuple[str | None, str | None]:
    """The line with `.float()` on each half operand of the call, and the first such operand
    (`logits.float().numpy()`, `torch.cdist(z.float(), protos.float())`)."""
    import torch

    found = _call_on(line, name)
    if found is None:
        return None, None
    node, operands = found
    half = (torch.float16, torch.bfloat16)
    edits = [operand for value, operand in zip(args, operands)
             if isinstance(value, torch.Tensor) and value.dtype in half]
    edits += [k.value for k in node.keywords
              if isinstance(kwargs.get(k.arg), torch.Tensor) and kwargs[k.arg].dtype in half]
    if not edits:
        return None, None
    expr = line[slice(*segment(line, edits[0]))]
    for operand in sorted(edits, key=lambda n: n.col_offset, reverse=True):
        start, end = segment(line, operand)
        simple = isinstance(operand, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
        text = line[start:end] if simple else f"({line[start:end]})"
        line = line[:start] + text + ".float()" + line[end:]
    return line, expr


def _operand(line: str, name: str, args, tensor) -> str | None:
    """The text on the line of the operand that is `tensor` (`scores` in
    `scores.masked_fill(mask, -1e9)`)."""
    found = _call_on(line, name) if tensor is not None else None
    if found is None:
        return None
    for value, operand in zip(args, found[1]):
        if value is tensor:
            return line[slice(*segment(line, operand))]
    return None


def _local_name(tensor, frame) -> str | None:
    """The variable of the user's frame that holds this very tensor."""
    for key, value in frame.f_locals.items():
        if value is tensor and not key.startswith("_"):
            return key
    return None


def _replace_number(line: str, value: float, replacement: str) -> str | None:
    """The line with the literal that wrote `value` (`-1e9`) replaced, when it is on it."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    for i, token in enumerate(tokens):
        if token.type != tokenize.NUMBER:
            continue
        try:
            number = float(token.string.replace("_", ""))
        except ValueError:
            continue
        negative = i > 0 and tokens[i - 1].string == "-"
        if number != abs(value) or negative != (value < 0):
            continue
        start = tokens[i - 1].start[1] if negative else token.start[1]
        return line[:start] + replacement + line[token.end[1]:]
    return None


def _keeping_lines(line: str, name: str, args, kwargs, kind: str, birth, frame) -> tuple:
    """(the user's line written so that it keeps the values, each way most wanted first; the
    text of its half operand, whose dtype a later line may need back). Made in float32 (a
    cast or creation), a number the dtype cannot hold as the dtype's own `torch.finfo` limit,
    a running total in float32, `.float()` on the half operands (and cast back at the end)."""
    float_line, expr = _with_float(line, name, args, kwargs)
    out = []
    if kind == CONSTANT:
        details = birth.details.get(CONSTANT) or {}
        held, value = details.get("held"), details.get("value")
        if value is not None and (held == 0 or abs(held) == float("inf")):
            half = _half_tensor(args, kwargs)
            expr = expr or _operand(line, name, args, half) or (
                _local_name(half, frame) if half is not None else None)
            bound = "tiny" if held == 0 else ("min" if value < 0 else "max")
            sign = "-" if held == 0 and value < 0 else ""
            finfo = f"{sign}torch.finfo({expr}.dtype).{bound}" if expr else \
                f"{sign}torch.finfo(torch.{birth.dtype}).{bound}"
            out.append(_replace_number(line, value, finfo))
    if _half_tensor(args, kwargs) is None and name in CASTS or not _any_tensor(args, kwargs):
        out.append(_made_in_float32(line, name, args))
    if kind == "absorbed":
        out.append(augmented(line) or assigned_in_place(line))
    out.append(casts_to_float32(line))
    leaves, leaf = _half_names_float(line, frame)
    expr = expr or leaf
    for text in (leaves, float_line):
        if text is not None:
            out += [text, cast_back(text, expr)]
    # Only code that parses, and never an in-place call on a float32 temporary (it would
    # change nothing the script keeps).
    temporary = f".float().{name}(" if name.endswith("_") and not name.startswith("_") else None
    return tuple(dict.fromkeys(text for text in out if text and _parses(text) and
                               (temporary is None or temporary not in text))), expr


def _parses(line: str) -> bool:
    return _statement_tree(line.strip()) is not None


_ABOUT = ("dtype", "device", "shape", "ndim", "size", "is_floating_point")


def _half_names_float(line: str, frame) -> tuple[str | None, str | None]:
    """The line with `.float()` on each name it reads that holds a half tensor (`x` in
    `(x * scale).exp().sum()`): the whole line computes in float32, whichever of its operations
    lost the values. And the first such name."""
    import torch

    tree = _statement_tree(line)
    if tree is None:
        return None, None
    about = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Attribute) and node.attr in _ABOUT}
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in about:
            value = frame.f_locals.get(node.id, frame.f_globals.get(node.id))
            if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.bfloat16):
                names.append(node)
    if not names:
        return None, None
    first = line[slice(*segment(line, min(names, key=lambda n: n.col_offset)))]
    for node in sorted(names, key=lambda n: n.col_offset, reverse=True):
        start, end = segment(line, node)
        line = line[:start] + line[start:end] + ".float()" + line[end:]
    return line, first


def _statement_tree(line: str):
    """The line's syntax tree; a line that opens a block (`if preds.numpy().any():`) parses
    with a body. None when it does not parse alone."""
    for text in (line, line + " pass"):
        try:
            return ast.parse(text)
        except SyntaxError:
            continue
    return None


def _any_tensor(args, kwargs) -> bool:
    import torch

    return any(isinstance(v, torch.Tensor) for v in (*args, *kwargs.values()))


def _made_in_float32(line: str, name: str, args=()) -> str | None:
    """`torch.arange(n, dtype=x.dtype)` as `torch.arange(n, dtype=torch.float32)`,
    `pos.half()` as `pos.float()`, `pos.to(x.dtype)` as `pos.to(torch.float32)` (the argument
    that is the dtype, wherever it stands: `ids.to(dev, torch.float16, True)`)."""
    import torch

    found = _call_on(line, name)
    if found is None:
        return None
    node, _ = found
    if name in ("half", "bfloat16"):
        start, end, text = float_cast(line, node)
        return line[:start] + text + line[end:]
    keyword = next((k for k in node.keywords if k.arg == "dtype"), None)
    target = keyword.value if keyword is not None else None
    if target is None and name in ("to", "type"):
        given = list(args[1:])     # a method: the receiver is not among the call's arguments
        target = next((arg for arg, value in zip(node.args, given)
                       if isinstance(value, torch.dtype)), None)
    if target is not None:
        start, end = segment(line, target)
        return line[:start] + "torch.float32" + line[end:]
    if name in ("to", "type", "copy_"):
        return None
    end = segment(line, node)[1] - 1          # a creation in the default dtype: say float32
    before = line[:end].rstrip()
    joint = "" if before.endswith("(") else " " if before.endswith(",") else ", "
    return before + joint + "dtype=torch.float32" + line[end:]


def _autocast_on(tensor) -> str | None:
    import torch

    device = tensor.device.type
    try:
        return device if torch.is_autocast_enabled(device) else None
    except (RuntimeError, TypeError):   # a device type autocast does not know
        return None


def _replace_name(line: str, name: str, replacement: str) -> str | None:
    found = list(re.finditer(rf"(?<![\w.]){re.escape(name)}(?![\w(\[])", line))
    if not line or len(found) != 1 or line.startswith(f"{name} ="):
        return None
    match = found[0]
    return line[:match.start()] + replacement + line[match.end():]
