"""Precision decisions a library makes for the script, recorded where the script called it.

The Recorder's part (core/script/recover.py) for calls of libraries other than torch,
transformers and datasets: PEFT's
- `prepare_model_for_kbit_training(model)` casts every float16 and bfloat16 parameter to float32
  (meant for 4- and 8-bit models; a bfloat16 model comes out float32, twice the memory, peft
  #1149): recorded as a cast of the model by that call (`"by"`), so provenance names it;
- `PeftModel(model, ...)` (what `get_peft_model` and `PeftModel.from_pretrained` make): the
  wrapper is recorded with the model it wraps, so the wrapper's dtype is told from the model's
  load and casts. Its adapters stay float32 on a half base on purpose (`autocast_adapter_dtype`,
  PEFT's advice): diagnosis.keep_in_fp32_modules asks PEFT which modules those are.

peft is not imported for this: its attributes are wrapped the moment the script imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.metadata
import importlib.util
import sys
import weakref
from pathlib import Path

from ..common import dtypes


def watch_libraries(rec):
    """Wraps the calls above, now if peft is imported, else when the script imports it.
    `rec`: the Recorder (its user, patches, casts, wraps and errors). Returns what `unwatch`
    takes."""
    return after_import("peft", lambda module: _wrap_peft(rec), rec.errors)


def after_import(name: str, then, errors: list):
    """`then(module)` now if the package `name` is imported, else right after the script
    imports it (before its importing line goes on), when it is the installed library of that
    name (`installed_library`), not a module of the script's own. A failure of `then` is ours:
    it goes to `errors`, and the script's import goes on. Returns what `unwatch` takes."""
    def guarded(module):
        if not installed_library(module, name):
            return
        try:
            then(module)
        except Exception as bug:  # noqa: BLE001 - ours must not change the script
            errors.append(f"watching {name}: {type(bug).__name__}: {bug}")

    if name in sys.modules:
        guarded(sys.modules[name])
        return None
    finder = _AfterImport(name, guarded)
    sys.meta_path.insert(0, finder)
    return finder


def installed_library(module, name: str) -> bool:
    """Whether `module` is the package its distribution `name` installed (its files are that
    distribution's), not a `peft.py` or `lightning.py` of the script's own folder."""
    try:   # a subpackage (torch.distributed.fsdp) is its top package's distribution's
        distribution = importlib.metadata.distribution(name.partition(".")[0])
    except importlib.metadata.PackageNotFoundError:
        return False
    origin = getattr(module, "__file__", None)
    if origin is None:
        return False
    origin = Path(origin).resolve()
    return any(distribution.locate_file(file).resolve() == origin
               for file in distribution.files or () if file.name == origin.name)


def unwatch(finder):
    if finder is not None and finder in sys.meta_path:
        sys.meta_path.remove(finder)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `then(module)` right after the package `name` is imported, before the importing
    line goes on. Libraries ask for its spec without importing it (transformers'
    `is_peft_available`): only the import itself counts."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then
        self._finding = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self._finding:
            return None
        self._finding = True            # the finders after us find the package
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, finder = spec.loader.exec_module, self

        def exec_module(module):
            execute(module)
            unwatch(finder)
            finder.then(module)

        spec.loader.exec_module = exec_module
        return spec


def _wrap_peft(rec):
    import peft
    import peft.utils
    import peft.utils.other
    from peft.peft_model import PeftModel

    original = peft.utils.other.prepare_model_for_kbit_training
    wrapper = _dtype_decision(rec, original, "peft's prepare_model_for_kbit_training",
                              "it is meant for 4- and 8-bit models (it casts every other "
                              "parameter to float32); a model that is not quantized needs no "
                              "preparing")
    for owner in (peft, peft.utils, peft.utils.other):
        if owner.__dict__.get("prepare_model_for_kbit_training") is original:
            rec._patches.set(owner, "prepare_model_for_kbit_training", wrapper)
    rec._patches.set(PeftModel, "__init__", _wrapper_made(rec, PeftModel.__init__))


def _dtype_decision(rec, original, by: str, advice: str):
    """A library function that takes the model first and may change its dtype in place;
    `advice`: what to know about it, said with the finding."""

    def decide(model, *args, **kwargs):
        source = rec.user.caller_is_user(2)
        before = majority_dtype(model) if source is not None else None
        result = original(model, *args, **kwargs)
        after = majority_dtype(model) if source is not None else None
        if before != after:
            rec.casts.append({"ref": weakref.ref(model), "dtype": after, "device": None,
                              "source": source, "by": by, "before": before, "advice": advice})
        return result

    return decide


def _wrapper_made(rec, original):
    def __init__(wrapper, model, *args, **kwargs):
        original(wrapper, model, *args, **kwargs)
        frame = sys._getframe(1)
        source = rec.user.frame_source(frame)
        if source is not None:
            rec.wraps[wrapper] = {"model": weakref.ref(model), "source": source,
                                  "by": _entry_called(rec.user, frame)}

    return __init__


def _entry_called(user, frame) -> str:
    """"peft's get_peft_model": the library function the user's innermost line called."""
    inner = frame
    while frame is not None and not user.owns(frame.f_code.co_filename):
        inner, frame = frame, frame.f_back
    code = inner.f_code
    package = str(inner.f_globals.get("__name__", "")).split(".")[0]
    return f"{package}'s {getattr(code, 'co_qualname', code.co_name)}"


def majority_dtype(model) -> str | None:
    """The floating dtype most of the model's parameters hold."""
    counts: dict = {}
    for param in model.parameters():
        if param.is_floating_point():
            name = dtypes.name_of(param.dtype)
            counts[name] = counts.get(name, 0) + param.numel()
    return max(counts, key=counts.get) if counts else None
