"""Recovering a pipeline spec from a script by watching its calls, not by reading its text.

While the script runs, the entry points a Hugging Face pipeline goes through are wrapped:
`from_pretrained` (Auto classes and models), `load_dataset` / `load_from_disk`, the split it
picks, `Dataset.map` (what the function returns before Arrow stores it, and what was stored),
`with_format` / `set_format`, `DataLoader` (a collate function of its own), the model's
`.half()` / `.to(...)` / `.cuda()`, and `torch.autocast`; for where a model's dtype came from
(core/script/provenance.py) also `from_config`, `torch.set_default_dtype` and the optimizers made
(by anyone: an optimizer over a model's parameters says it is trained), and the calls of other
libraries that decide a model's dtype (core/script/library_calls.py: PEFT's). Only calls made by
the user's own code count (a library calling `from_pretrained` inside another one is not the user's
choice).
`observed_spec` turns what was seen into a `PipelineSpec` for the rules, and says whether it
describes the script well enough to continue as a pipeline.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ..diagnostics.report import RunError
from ..common import dtypes
from ..common.errors import InputError
from ..common.files import expand_user
from ..diagnostics.rules.words import at_line
from ..hf.loading import AUTO_CLASSES
from ..spec.value import PipelineSpec
from .library_calls import unwatch, watch_libraries
from .tracer import Patches, UserCode

_TASK_OF_AUTO = {cls: task for task, cls in AUTO_CLASSES.items()}


@dataclass
class Load:
    model: str
    cls: str
    kwargs: dict
    source: dict | None
    ref: object                           # weakref to the loaded model


@dataclass
class Build:
    """A model built from a config (`AutoModel...from_config`, `Model._from_config`)."""

    cls: str
    dtype_argument: str | None            # the dtype= it was given
    config_dtype: str | None              # config.dtype when called (from_config overwrites it)
    default_dtype: str                    # torch's default dtype when called
    source: dict | None
    ref: object                           # weakref to the model


@dataclass
class MapCall:
    source: dict | None
    function: object
    intended: dict = field(default_factory=dict)   # output key -> floating dtype it returned
    stored: dict = field(default_factory=dict)     # column -> dtype after Arrow stored it


@dataclass
class Autocast:
    device_type: str
    dtype: str | None                     # None: autocast(enabled=False)
    source: dict | None


class Recorder:
    """Wraps the entry points (see the module docstring); `uninstall` puts them back."""

    def __init__(self, user: UserCode):
        self.user = user
        self.loads: list[Load] = []
        self.datasets: list[dict] = []    # {"dataset", "dataset_config", "split", "source"}
        self.maps: list[MapCall] = []
        self.formats: list[dict] = []     # {"format", "format_dtype", "source"}
        self.collate: dict | None = None  # source of a DataLoader with its own collate_fn
        # Model casts {"ref", "dtype", "device", "source"}, in order; a library's has "by" (the
        # call, "peft's prepare_model_for_kbit_training") and "before" (the dtype it changed).
        self.casts: list[dict] = []
        # A library's wrapper of a model (a PeftModel) -> {"model" (weakref), "source", "by"}
        self.wraps = weakref.WeakKeyDictionary()
        self.autocasts: list[Autocast] = []  # entered and not yet left, innermost last
        self.builds: list[Build] = []     # from_config calls
        self.defaults: list[dict] = []    # torch.set_default_dtype calls: {"dtype", "source"}
        self.optimizers = weakref.WeakSet()   # every optimizer made (by anyone)
        self.clips: list[dict] = []       # the script's clip_grad_norm_ calls: {"max_norm", "source"}
        self._patches = Patches()
        self._skip = ()
        self._libraries = None
        self.errors: list[str] = []       # fp16studio's own failures while watching

    # -- installing ---------------------------------------------------------------------------
    def install(self):
        import datasets
        import torch
        import transformers
        from transformers.models.auto.auto_factory import _BaseAutoModelClass

        self._skip = tuple(str(Path(m.__file__).parent) + "/" for m in (torch, datasets))
        for owner in (transformers.PreTrainedModel, _BaseAutoModelClass):
            self._patches.set(owner, "from_pretrained", classmethod(self._from_pretrained(
                owner.__dict__["from_pretrained"].__func__)))
        for owner in (datasets, datasets.load):
            self._patches.set(owner, "load_dataset", self._loader(datasets.load.load_dataset))
            self._patches.set(owner, "load_from_disk", self._loader(datasets.load.load_from_disk))
        self._patches.set(datasets.DatasetDict, "__getitem__",
                    self._split(datasets.DatasetDict.__getitem__))
        self._patches.set(datasets.Dataset, "map", self._map(datasets.Dataset.map))
        for name in ("with_format", "set_format"):
            self._patches.set(datasets.Dataset, name, self._format(getattr(datasets.Dataset, name)))
        self._patches.set(torch.utils.data.DataLoader, "__init__",
                    self._data_loader(torch.utils.data.DataLoader.__init__))
        for name in ("half", "bfloat16", "float", "to", "cuda"):
            self._patches.set(torch.nn.Module, name, self._module_cast(getattr(torch.nn.Module, name), name))
        autocast = torch.amp.autocast_mode.autocast
        self._patches.set(autocast, "__enter__", self._autocast_enter(autocast.__enter__))
        self._patches.set(autocast, "__exit__", self._autocast_exit(autocast.__exit__))
        self._patches.set(_BaseAutoModelClass, "from_config", classmethod(self._from_config(
            _BaseAutoModelClass.__dict__["from_config"].__func__)))
        self._patches.set(transformers.PreTrainedModel, "_from_config", classmethod(self._from_config(
            transformers.PreTrainedModel.__dict__["_from_config"].__func__)))
        self._patches.set(torch, "set_default_dtype", self._set_default_dtype(torch.set_default_dtype))
        self._patches.set(torch.optim.Optimizer, "__init__",
                    self._optimizer_init(torch.optim.Optimizer.__init__))
        import torch.nn.utils.clip_grad as clip_grad

        clip = self._clip(clip_grad.clip_grad_norm_)
        for owner in (torch.nn.utils, clip_grad):
            self._patches.set(owner, "clip_grad_norm_", clip)
        self._libraries = watch_libraries(self)

    def uninstall(self):
        unwatch(self._libraries)
        self._patches.undo()


    def _called_by_user(self, through: str = ""):
        # Frames: the user's line -> [torch/datasets wrappers] -> our wrapper -> here.
        return self.user.caller_is_user(3, skip=self._skip, through=through)

    # -- wrappers -------------------------------------------------------------------------------
    def _from_pretrained(self, original):
        rec = self

        def from_pretrained(cls, *args, **kwargs):
            source = rec._called_by_user()
            model = original(cls, *args, **kwargs)
            if source is not None and args and hasattr(model, "parameters"):
                rec.loads.append(Load(_path_or_id(args[0]), cls.__name__, dict(kwargs), source,
                                      weakref.ref(model)))
            return model

        return from_pretrained

    def _from_config(self, original):
        rec = self

        def from_config(cls, config, *args, **kwargs):
            source = rec._called_by_user()
            if source is None:
                return original(cls, config, *args, **kwargs)
            import torch

            asked = kwargs.get("dtype", kwargs.get("torch_dtype"))
            config_dtype = getattr(config, "dtype", None)   # read before the call overwrites it
            default = dtypes.name_of(torch.get_default_dtype())
            model = original(cls, config, *args, **kwargs)
            if hasattr(model, "parameters"):
                rec.builds.append(Build(
                    cls.__name__, _dtype_name(asked), _dtype_name(config_dtype), default, source,
                    weakref.ref(model)))
            return model

        return from_config

    def _set_default_dtype(self, original):
        rec = self

        def set_default_dtype(d):
            source = rec._called_by_user()
            result = original(d)
            if source is not None:
                rec.defaults.append({"dtype": dtypes.name_of(d), "source": source})
            return result

        set_default_dtype.__wrapped__ = original
        return set_default_dtype

    def _optimizer_init(self, original):
        rec = self

        def __init__(self, *args, **kwargs):
            rec.optimizers.add(self)
            return original(self, *args, **kwargs)

        __init__.__wrapped__ = original
        return __init__

    def _clip(self, original):
        rec = self

        def clip_grad_norm_(*args, **kwargs):
            # The max norm of the script's own clipping (a spec's train.clip_grad_norm).
            source = rec._called_by_user(through="clip_grad_norm_")
            if source is not None:
                max_norm = kwargs.get("max_norm", args[1] if len(args) > 1 else None)
                rec.clips.append({"max_norm": max_norm if isinstance(max_norm, (int, float))
                                  else None, "source": source})
            return original(*args, **kwargs)

        clip_grad_norm_.__wrapped__ = original
        return clip_grad_norm_

    def _loader(self, original):
        rec = self

        def load(path, *args, **kwargs):
            source = rec._called_by_user()
            result = original(path, *args, **kwargs)
            if source is not None:
                rec.datasets.append(_dataset_doc(original.__name__, path, args, kwargs, source))
            return result

        load.__wrapped__ = original
        return load

    def _split(self, original):
        rec = self

        def getitem(self, key):
            if isinstance(key, str) and rec.datasets and rec._called_by_user() is not None:
                rec.datasets[-1]["split"] = key
            return original(self, key)

        return getitem

    def _map(self, original):
        rec = self

        def map(self, function=None, *args, **kwargs):
            source = rec._called_by_user()
            if source is None or function is None:
                return original(self, function, *args, **kwargs)
            call = MapCall(source, function)
            rec.maps.append(call)
            result = original(self, _Observed(function, call), *args, **kwargs)
            if not call.intended and len(self) and not kwargs.get("with_indices"):
                # Read from datasets' cache, the function never ran: run it on one row.
                rows = self[:1] if kwargs.get("batched") else self[0]
                call.intended = _floating_dtypes(function(dict(rows)) or {})
            from ..data.columns import feature_dtype

            call.stored = {k: feature_dtype(f) for k, f in result.features.items()}
            return result

        return map

    def _format(self, original):
        rec = self

        def set_format(self, type=None, *args, **kwargs):
            source = rec._called_by_user()
            if source is not None:
                dtype = kwargs.get("dtype")
                rec.formats.append({"format": type or "python", "source": source,
                                    "format_dtype": dtypes.name_of(dtype) if dtype else None})
            return original(self, type, *args, **kwargs)

        return set_format

    def _data_loader(self, original):
        rec = self

        def __init__(self, *args, **kwargs):
            if kwargs.get("collate_fn") is not None and rec.collate is None:
                rec.collate = rec._called_by_user() or {"file": None, "line": None}
            return original(self, *args, **kwargs)

        return __init__

    def _module_cast(self, original, name):
        rec = self

        def cast(module, *args, **kwargs):
            # transformers overrides .half()/.to() and calls super(): look through those.
            source = rec._called_by_user(through=name)
            if source is not None:
                rec._record_cast(module, name, args, kwargs, source)
            return original(module, *args, **kwargs)

        cast.__wrapped__ = original
        return cast

    def _record_cast(self, module, name, args, kwargs, source):
        import torch

        dtype = device = None
        if name == "to":
            device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        elif name == "cuda":
            device = "cuda"
        else:
            dtype = {"half": "float16", "bfloat16": "bfloat16", "float": "float32"}[name]
        self.casts.append({"ref": weakref.ref(module), "source": source,
                           "dtype": dtypes.name_of(dtype) if dtype is not None else None,
                           "device": str(device) if device is not None else None})

    def _autocast_enter(self, original):
        rec = self

        def __enter__(self):
            result = original(self)
            source = rec._called_by_user()
            if source is not None and not getattr(self, "_fp16studio_seen", False):
                self._fp16studio_seen = True
                # torch turns an autocast for a device this machine lacks off (with a warning):
                # what the user asked for is still the dtype, inactive (autocast-inactive).
                asked = self._enabled or not _device_present(self.device)
                dtype = dtypes.name_of(self.fast_dtype) if asked else None
                rec.autocasts.append(Autocast(self.device, dtype, source))
            return result

        return __enter__

    def _autocast_exit(self, original):
        rec = self

        def __exit__(self, *exc):
            if getattr(self, "_fp16studio_seen", False) and rec.autocasts:
                self._fp16studio_seen = False
                rec.autocasts.pop()
            return original(self, *exc)

        return __exit__

    # -- reading ------------------------------------------------------------------------------
    def _wrapped(self, module) -> list:
        """The module and the models it wraps (a PeftModel's base model), outermost first:
        each is the same model as far as its dtype's story goes."""
        chain = [module]
        while chain[-1] in self.wraps and self.wraps[chain[-1]]["model"]() is not None:
            chain.append(self.wraps[chain[-1]]["model"]())
        return chain

    def wrapper_of(self, module) -> dict | None:
        """How a library wrapped this model ({"source", "by"}), if it did."""
        return self.wraps.get(module)

    def load_of(self, module) -> Load | None:
        models = self._wrapped(module)
        return next((load for load in reversed(self.loads) if load.ref() in models), None)

    def build_of(self, module) -> Build | None:
        models = self._wrapped(module)
        return next((b for b in reversed(self.builds) if b.ref() in models), None)

    def optimized(self, module) -> bool:
        """Whether an optimizer made so far updates this model's parameters."""
        first = next(module.parameters(), None)
        return first is not None and any(
            p is first for opt in list(self.optimizers) for group in opt.param_groups
            for p in group["params"])

    def casts_of(self, module) -> list[dict]:
        models = self._wrapped(module)
        return [c for c in self.casts if any(c["ref"]() is m for m in models)]

    def current_autocast(self, module=None) -> Autocast | None:
        """The script's innermost autocast entered and not left; else, for `module`, one a
        library entered around its call (Lightning's precision plugin, accelerate's), on the
        device type of its parameters (no line of the script's: `source` None)."""
        if self.autocasts:
            return self.autocasts[-1]
        first = next(module.parameters(), None) if module is not None else None
        if first is None:
            return None
        import torch

        device = first.device.type
        if device not in ("cpu", "cuda") or not torch.is_autocast_enabled(device):
            return None
        return Autocast(device, dtypes.name_of(torch.get_autocast_dtype(device)), None)


def _dtype_name(value) -> str | None:
    """A dtype argument's name ("auto" kept), None for none."""
    return None if value is None else dtypes.name_of(value)


def _device_present(device_type: str) -> bool:
    import torch

    module = getattr(torch, device_type, None) if device_type != "cpu" else None
    return device_type == "cpu" or bool(module is not None and module.is_available())


class _Observed:
    """The user's map function, watched on its first call; hashes as the function itself so
    datasets' cache fingerprint stays what it would be."""

    def __init__(self, function, call: MapCall):
        self.function, self.call = function, call

    def __call__(self, *args, **kwargs):
        out = self.function(*args, **kwargs)
        if self.call is not None and isinstance(out, dict) and not self.call.intended:
            self.call.intended = _floating_dtypes(out)
        return out

    def __getstate__(self):
        return {"function": self.function, "call": None}


def _floating_dtypes(out: dict) -> dict:
    import torch

    found = {}
    for key, value in out.items():
        first = value[0] if isinstance(value, (list, tuple)) and value else value
        if torch.is_tensor(first) and first.is_floating_point():
            found[key] = dtypes.name_of(first.dtype)
    return found


def _path_or_id(value) -> str:
    text = str(value)
    path = expand_user(text)
    return str(path.resolve()) if path.exists() else text


def _dataset_doc(loader, path, args, kwargs, source) -> dict:
    split = kwargs.get("split")
    doc = {"dataset": _path_or_id(path), "dataset_config": None, "source": source,
           "split": str(split).split("[")[0] if split else None}
    if loader == "load_dataset":
        config = args[0] if args else kwargs.get("name")
        files = kwargs.get("data_files") or kwargs.get("data_dir")
        if path in ("json", "csv", "parquet", "imagefolder", "audiofolder") and files:
            if isinstance(files, dict):
                doc["split"] = doc["split"] or next(iter(files))
                files = next(iter(files.values()))
            doc["dataset"] = _path_or_id(files if isinstance(files, str) else files[0])
        elif isinstance(config, str):
            doc["dataset_config"] = config
    return doc


# -- the spec -----------------------------------------------------------------------------------
@dataclass
class Observed:
    spec: PipelineSpec
    recovered: bool                       # it describes the script well enough to re-run
    why_not: str = ""
    sources: dict = field(default_factory=dict)   # what -> {"file", "line"}: load, cast, map...
    provenance: dict | None = None        # where the model's dtype came from (script.provenance)
    input_provenance: dict = field(default_factory=dict)   # batch key -> where its dtype came from


def observed_spec(rec: Recorder, module, snapshot) -> Observed:
    """The spec of what the script did up to this model's first forward pass.

    `snapshot` is script.evidence.Snapshot: the batch facts and the device the model ran on.
    """
    load = rec.load_of(module)
    casts = rec.casts_of(module)
    data = rec.datasets[-1] if rec.datasets else None
    edits: dict = {"model": load.model if load else snapshot.trace.cls,
                   "dataset": data["dataset"] if data else "script"}
    sources = {}
    if load is not None:
        sources["load"] = load.source
        kwargs = load.kwargs
        dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
        edits["model_dtype"] = (dtypes.name_of(dtype) if dtype not in (None, "auto")
                                else "auto")
        edits["task"] = _TASK_OF_AUTO.get(load.cls, "auto")
        for key in ("revision", "device_map"):
            if isinstance(kwargs.get(key), str):
                edits[key] = kwargs[key]
        edits["trust_remote_code"] = bool(kwargs.get("trust_remote_code", False))
    dtype_casts = [c for c in casts if c["dtype"]]
    if dtype_casts:
        edits["model_cast"] = dtype_casts[-1]["dtype"]
        sources["cast"] = dtype_casts[-1]["source"]
    device = snapshot.device
    edits["device"] = "cuda" if device.startswith("cuda:0") else device
    if data is not None:
        sources["dataset"] = data["source"]
        edits["split"] = data["split"] or "train"
        edits["dataset_config"] = data["dataset_config"]
    why = _unrecoverable(rec, module, load, data, snapshot)
    intended = {}
    for call in rec.maps:
        intended.update(call.intended)
    preprocess = _preprocess_ref(rec, snapshot)
    if preprocess:
        edits["preprocess"] = preprocess
    elif intended and snapshot.main_input in intended:
        # The function made the model's input itself (its processor call) and cast it.
        edits["map_dtype"] = intended[snapshot.main_input]
    if rec.maps:
        sources["map"] = rec.maps[-1].source
    fmt = rec.formats[-1] if rec.formats else None
    edits["format"] = "torch" if fmt and fmt["format"] in ("torch", "pt") else "python"
    if fmt and fmt["format_dtype"]:
        edits["format_dtype"] = fmt["format_dtype"]
    if fmt:
        sources["format"] = fmt["source"]
    edits.update(_input_edits(snapshot, edits.get("format_dtype")))
    autocast = snapshot.trace.autocast
    if autocast is not None and autocast.dtype:
        edits["autocast"] = autocast.dtype
        edits["autocast_device"] = autocast.device_type
        sources["autocast"] = autocast.source
    edits["with_labels"] = "labels" in snapshot.facts
    if snapshot.batch_size:
        edits["batch_size"] = edits["samples"] = snapshot.batch_size
    try:
        spec = PipelineSpec.from_dict(edits)
    except InputError as exc:  # something the spec cannot say (an autocast dtype of float32...)
        spec = PipelineSpec.from_dict({"model": edits["model"], "dataset": edits["dataset"]})
        why = why or f"the script does something a spec cannot say ({exc})"
    from .provenance import input_provenance, model_provenance

    return Observed(spec, recovered=not why, why_not=why, sources=sources,
                    provenance=model_provenance(rec, module, snapshot.param_dtypes),
                    input_provenance=input_provenance(rec, snapshot))


def _unrecoverable(rec: Recorder, module, load, data, snapshot) -> str:
    wrapped = rec.wrapper_of(module)
    if wrapped is not None:
        return (f"{wrapped['by']}{at_line(wrapped['source'])} wrapped the model (its adapters "
                "are not something a spec can say)")
    if load is None:
        return "the model was not loaded with from_pretrained (a class of the script's own?)"
    if data is None:
        return "the batch did not come from load_dataset / load_from_disk"
    if rec.collate is not None:
        return "the DataLoader uses a collate function of the script's own"
    if any(c.intended and snapshot.main_input not in c.intended
           and _preprocess_file(c.function) is None for c in rec.maps):
        return "a Dataset.map function of the script's own that a spec cannot name"
    return ""


def _preprocess_ref(rec: Recorder, snapshot) -> str | None:
    """'file.py:function' when the map function lives in a file of its own beside the script
    (importing it runs nothing else), the way a spec's preprocess names it."""
    for call in rec.maps:
        ref = _preprocess_file(call.function)
        if ref is not None:
            return ref
    return None


def _preprocess_file(function) -> str | None:
    import sys

    module = sys.modules.get(getattr(function, "__module__", None) or "")
    path = getattr(module, "__file__", None)
    name = getattr(function, "__qualname__", "")
    if module is None or module.__name__ == "__main__" or not path or not name.isidentifier():
        return None
    return f"{Path(path).resolve()}:{name}"


def _input_edits(snapshot, format_dtype) -> dict:
    """input_dtype / input_cast: casts the batch got after the dataset made it."""
    edits = {}
    half_inputs = {f.final for f in snapshot.facts.values()
                   if f.final and dtypes.is_floating_name(f.final) and f.final != "float32"}
    cast = [f for f in snapshot.facts.values() if f.loaded != f.final and f.final]
    if half_inputs and not format_dtype and cast:
        edits["input_dtype"] = min(half_inputs)
    ints_cast = [f for f in cast if f.stored and not dtypes.is_floating_name(f.stored)]
    if ints_cast and not format_dtype:
        edits["input_cast"] = "all"
    return edits


# -- the training step, and whether the spec reproduces the script ------------------------------
_OPTIMIZER_NAMES = {"AdamW": "adamw", "Adam": "adam", "SGD": "sgd"}
_DEFAULT_EPS = 1e-8   # torch's Adam and AdamW: a spec says it as null


def with_train(observed: Observed, steps: list, clips: list, param_dtypes: dict) -> Observed:
    """The observed spec with `train` filled from the training steps the script was followed
    through (`steps`: run.training.Step records; `clips`: Recorder.clips), or not recovered, and
    why, when the loop is one a spec cannot say."""
    import dataclasses

    if not observed.recovered or not steps:
        return observed
    train, why = _observed_train(steps, clips, param_dtypes)
    if not why and not observed.spec.with_labels:
        why = ("the script computes its loss outside the model (a spec's training step uses the "
               "loss the model computes from the labels)")
    if not why:
        try:
            spec = observed.spec.replace(train=train)
        except InputError as exc:
            why = f"the script's training step is one a spec cannot say ({exc})"
    if why:
        return dataclasses.replace(observed, recovered=False, why_not=why)
    sources = dict(observed.sources)
    if clips:
        sources["clip"] = clips[0]["source"]
    return dataclasses.replace(observed, spec=spec, sources=sources)


def _observed_train(steps: list, clips: list, param_dtypes: dict) -> tuple[dict | None, str]:
    """(train, "") from what the steps recorded, or (None, why not)."""
    opt = next((o for step in steps for o in step.optimizers), None)
    if opt is None:
        return None, "no optimizer.step() ran in the training steps followed"
    name = _OPTIMIZER_NAMES.get(opt.cls)
    if name is None:
        return None, f"the optimizer {opt.cls} is not one a spec names (AdamW, Adam, SGD)"
    if opt.lr is None:
        return None, f"the {opt.cls}'s lr is not a number"
    events = [event for event, _ in steps[0].scaler]
    scaler = steps[0].scaled or "scale" in events
    clip = None
    if "clip" in events:
        if not clips or clips[0]["max_norm"] is None:
            return None, ("the gradients were clipped, but not by a clip_grad_norm_(parameters, "
                          "max_norm) call of the script's own")
        clip = float(clips[0]["max_norm"])
    before = clip is not None and scaler and "unscale_" not in events[:events.index("clip")]
    # A float32 copy of half weights is what the optimizer updates: the script's master weights.
    half = any(d in dtypes.HALF_NAMES for d in param_dtypes)
    master = half and not any(d in dtypes.HALF_NAMES for d in opt.param_dtypes)
    eps = None if name == "sgd" or opt.eps in (None, _DEFAULT_EPS) else opt.eps
    return {"optimizer": name, "lr": opt.lr, "eps": eps,
            "steps": max(1, sum(1 for step in steps if step.done)), "grad_scaler": scaler,
            "clip_grad_norm": clip, "clip_before_unscale": before, "master_weights": master}, ""


def reproduction(spec: PipelineSpec, findings: list, error: RunError | None) -> str:
    """"" when diagnosing `spec` comes to what the traced script came to (`findings`, and its
    `error`), else why not, in words for the trace's notes."""
    from ..common.errors import first_line
    from ..diagnostics.diagnosis import diagnose

    try:
        with _imported_preprocess(spec):
            report = diagnose(spec)
    except InputError as exc:
        return f"diagnosing the recovered spec fails ({exc})"
    except KeyboardInterrupt:
        return "the script's time ran out while its recovered spec was being checked"
    except Exception as exc:  # noqa: BLE001 - whatever it is, the spec is not offered
        return f"diagnosing the recovered spec failed ({type(exc).__name__}: {first_line(exc)})"
    return outcome_difference(findings, error, report.findings, report.error)


@contextlib.contextmanager
def _imported_preprocess(spec: PipelineSpec):
    """While the recovered spec is checked in the script's process, its preprocess is the
    function of the module the script imported itself: loading the spec's preprocess would run
    that file's top-level code a second time (its side effects twice)."""
    from ..data import batch

    function = _imported_function(spec.preprocess) if spec.preprocess else None
    if function is None:
        yield
        return
    load = batch.load_user_function
    patches = Patches()
    patches.set(batch, "load_user_function",
                lambda given: function if given.preprocess == spec.preprocess else load(given))
    try:
        yield
    finally:
        patches.undo()


def _imported_function(preprocess: str):
    """The function `file.py:name` names, from the module the script imported from that file;
    None when no module holds it (`_preprocess_file` made the name from such a module)."""
    import sys

    file, _, name = preprocess.rpartition(":")
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and Path(path).resolve() == Path(file):
            function = getattr(module, name, None)
            if callable(function):
                return function
    return None


def outcome_difference(script: list, script_error: RunError | None, spec: list,
                       spec_error: RunError | None) -> str:
    """How the spec's diagnosis differs from the script's outcome; "" when it does not. The
    same codes of error findings; with none, the script's warnings are all found again; a
    script that failed must fail as a spec too."""
    want = {f.code for f in script if f.severity == "error"}
    got = {f.code for f in spec if f.severity == "error"}
    if want:
        missing, extra = want - got, got - want
    else:
        missing = {f.code for f in script if f.severity == "warning"} - {f.code for f in spec}
        extra = got
    parts = []
    if missing:
        parts.append(f"does not find {', '.join(sorted(missing))}")
    if extra:
        parts.append(f"finds {', '.join(sorted(extra))}, which the script did not show")
    if script_error is not None and not parts and spec_error is None and not got:
        parts.append(f"runs clean where the script failed ({script_error.type})")
    return ("diagnosing the recovered spec " + " and ".join(parts)) if parts else ""
