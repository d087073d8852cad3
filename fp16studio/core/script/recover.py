"""Recovering a pipeline spec from a script by watching its calls, not by reading its text.

While the script runs, the entry points a Hugging Face pipeline goes through are wrapped:
`from_pretrained` (Auto classes and models), `load_dataset` / `load_from_disk`, the split it
picks, `Dataset.map` (what the function returns before Arrow stores it, and what was stored),
`with_format` / `set_format`, `DataLoader` (a collate function of its own), the model's
`.half()` / `.to(...)` / `.cuda()`, and `torch.autocast`. Only calls made by the user's own code
count (a library calling `from_pretrained` inside another one is not the user's choice).
`observed_spec` turns what was seen into a `PipelineSpec` for the rules, and says whether it
describes the script well enough to continue as a pipeline.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ..common import dtypes
from ..common.errors import InputError
from ..common.files import expand_user
from ..hf.loading import AUTO_CLASSES
from ..spec.value import PipelineSpec
from .tracer import UserCode

_TASK_OF_AUTO = {cls: task for task, cls in AUTO_CLASSES.items()}


@dataclass
class Load:
    model: str
    cls: str
    kwargs: dict
    source: dict | None
    ref: object                           # weakref to the loaded model


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
        self.casts: list[dict] = []       # {"ref", "dtype", "device", "source"}: model casts
        self.autocasts: list[Autocast] = []  # entered and not yet left, innermost last
        self._patches: list[tuple] = []
        self._skip = ()

    # -- installing ---------------------------------------------------------------------------
    def install(self):
        import datasets
        import torch
        import transformers
        from transformers.models.auto.auto_factory import _BaseAutoModelClass

        self._skip = tuple(str(Path(m.__file__).parent) + "/" for m in (torch, datasets))
        for owner in (transformers.PreTrainedModel, _BaseAutoModelClass):
            self._patch(owner, "from_pretrained", classmethod(self._from_pretrained(
                owner.__dict__["from_pretrained"].__func__)))
        for owner in (datasets, datasets.load):
            self._patch(owner, "load_dataset", self._loader(datasets.load.load_dataset))
            self._patch(owner, "load_from_disk", self._loader(datasets.load.load_from_disk))
        self._patch(datasets.DatasetDict, "__getitem__",
                    self._split(datasets.DatasetDict.__getitem__))
        self._patch(datasets.Dataset, "map", self._map(datasets.Dataset.map))
        for name in ("with_format", "set_format"):
            self._patch(datasets.Dataset, name, self._format(getattr(datasets.Dataset, name)))
        self._patch(torch.utils.data.DataLoader, "__init__",
                    self._data_loader(torch.utils.data.DataLoader.__init__))
        for name in ("half", "bfloat16", "float", "to", "cuda"):
            self._patch(torch.nn.Module, name, self._module_cast(getattr(torch.nn.Module, name), name))
        autocast = torch.amp.autocast_mode.autocast
        self._patch(autocast, "__enter__", self._autocast_enter(autocast.__enter__))
        self._patch(autocast, "__exit__", self._autocast_exit(autocast.__exit__))

    def uninstall(self):
        for owner, name, original in reversed(self._patches):
            setattr(owner, name, original)
        self._patches.clear()

    def _patch(self, owner, name, wrapper):
        self._patches.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, wrapper)

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
    def load_of(self, module) -> Load | None:
        return next((load for load in reversed(self.loads) if load.ref() is module), None)

    def casts_of(self, module) -> list[dict]:
        return [c for c in self.casts if c["ref"]() is module]

    def current_autocast(self) -> Autocast | None:
        return self.autocasts[-1] if self.autocasts else None


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
    why = _unrecoverable(rec, load, data, snapshot)
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
    return Observed(spec, recovered=not why, why_not=why, sources=sources)


def _unrecoverable(rec: Recorder, load, data, snapshot) -> str:
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
