"""The pipeline spec: the single source of truth for one pipeline (CONTRACT §1).

A spec describes the pipeline as the user wrote it, mistakes included. It is immutable; a fix
is an edit that returns a new spec (`PipelineSpec.replace`), which makes undo a stack of specs.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common import dtypes
from ..common.codec import Document, meta
from ..common.errors import InputError
from ..common.files import expand_user
from ..common.float8 import parse_recipe

TASKS = ("auto", "image-classification", "sequence-classification", "feature-extraction",
         "causal-lm", "seq2seq-lm")
COLUMN_ROLES = ("text", "text_pair", "image", "audio", "label")
LABEL_DTYPES = ("int64", "float32")
DEVICE_TYPES = ("cpu", "cuda", "mps")
# The training step (`train`, CONTRACT §1): its fields and their defaults, in document order.
OPTIMIZERS = ("adamw", "adam", "sgd")
TRAIN_DEFAULTS = {"optimizer": "adamw", "lr": 1e-3, "eps": None, "steps": 2,
                  "grad_scaler": False, "clip_grad_norm": None, "clip_before_unscale": False,
                  "master_weights": False, "fp8": None, "fp8_keep": ()}
TRAIN_MAX_STEPS = 100


@dataclass(frozen=True)
class PipelineSpec(Document):
    """A pipeline as the user wrote it (CONTRACT §1)."""

    # Read by its own validation: an unknown key is an error with a suggestion, values normalised.
    __json_reader__ = "from_document"

    model: str
    dataset: str
    revision: str | None = None
    task: str = "auto"
    trust_remote_code: bool = False
    dataset_config: str | None = None
    split: str = "train"
    columns: dict[str, str] = field(default_factory=dict)
    samples: int = 8
    batch_size: int = 4
    preprocess: str | None = None
    map_dtype: str | None = None
    format: str = "torch"
    format_dtype: str | None = None
    device: str = "auto"
    device_map: str | None = None
    model_dtype: str = "float32"
    keep_fp32: tuple[str, ...] = ()
    input_dtype: str | None = None
    input_cast: str = "floating"
    input_device: str = "model"
    autocast: str | None = None
    with_labels: bool = False
    # The user's `model.half()` / `model.to(dtype)` after loading: casts everything, the
    # library's own float32 modules included (unlike `model_dtype`, which is `dtype=` at load).
    model_cast: str | None = None
    # Module patterns that run in float32 inside a half model (weights float32, inputs cast up,
    # outputs cast back): the fix that keeps the rest of the model half.
    run_in_float32: tuple[str, ...] = ()
    label_dtype: str | None = None
    # The device_type the user's torch.autocast(...) names; None: the model's own device type.
    autocast_device: str | None = None
    sampling_rate: int | None = None
    # The training step run after the forward pass, as the user's loop does it (TRAIN_DEFAULTS
    # holds its fields); None: inference only.
    train: dict | None = None
    # Fixes applied so far, oldest first: [{"id", "title"}]. The export names each in a comment.
    applied_fixes: tuple[dict, ...] = ()
    # Folder that relative paths (model, dataset, preprocess) are read from; not part of the
    # document, so a saved spec stays portable (only its full form, to an engine, carries it).
    base_dir: str | None = field(default=None, compare=False, repr=False,
                                 metadata=meta(internal=True))

    def __post_init__(self):
        # Normalise in place (frozen: object.__setattr__) so every spec in memory is canonical.
        norm = _validated(self)
        for key, value in norm.items():
            object.__setattr__(self, key, value)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict, base_dir: str | Path | None = None) -> "PipelineSpec":
        if not isinstance(data, dict):
            raise InputError("spec: expected an object of spec keys")
        unknown = sorted(set(data) - set(KEYS))
        if unknown:
            raise InputError(_unknown_key_message(unknown[0]))
        for required in ("model", "dataset"):
            if not data.get(required):
                raise InputError(f"spec: {required!r} is required")
        return cls(**data, base_dir=str(base_dir) if base_dir is not None else None)

    @classmethod
    def from_document(cls, doc) -> "PipelineSpec":
        """The codec's reader: a spec document, or its full form with `base_dir`."""
        if isinstance(doc, dict) and "base_dir" in doc:
            doc = dict(doc)
            return cls.from_dict(doc, doc.pop("base_dir"))
        return cls.from_dict(doc)

    def to_dict(self) -> dict[str, Any]:
        return self.to_json()

    def rebased(self, folder: str | Path) -> "PipelineSpec":
        """The same spec read from `folder`: relative local paths made absolute if they move."""
        folder = Path(folder)
        if not self.base_dir or Path(self.base_dir).resolve() == folder.resolve():
            return dataclasses.replace(self, base_dir=str(folder))
        edits = {}
        for key in ("model", "dataset", "preprocess"):
            value = getattr(self, key)
            if not value:
                continue
            file_part, sep, function = value.rpartition(":") if key == "preprocess" else (value, "", "")
            local = self.local_path(file_part)
            if local is not None and not expand_user(file_part).is_absolute():
                edits[key] = str(local.resolve()) + sep + function
        return dataclasses.replace(self, **edits, base_dir=str(folder))

    def replace(self, **edits) -> "PipelineSpec":
        unknown = sorted(set(edits) - set(KEYS))
        if unknown:
            raise InputError(_unknown_key_message(unknown[0]))
        return dataclasses.replace(self, **edits)

    # -- paths ----------------------------------------------------------------------------------
    def resolve_path(self, value: str) -> Path:
        """A path from the spec, relative to the spec's folder when it is not absolute."""
        path = expand_user(value)
        if not path.is_absolute() and self.base_dir:
            path = Path(self.base_dir) / path
        return path

    def local_path(self, value: str) -> Path | None:
        """The path if `value` names something that exists locally, else None (a Hub id)."""
        path = self.resolve_path(value)
        try:
            return path if path.exists() else None
        except (OSError, ValueError):  # a name too long, or with a NUL byte: nothing local
            return None


KEYS = tuple(f.name for f in dataclasses.fields(PipelineSpec) if f.name != "base_dir")
# Synthetic rows are made in memory: a few thousand show any dtype problem a million would.
SYNTHETIC_MAX_SAMPLES = 4096


class FrozenDict(dict):
    """A dict that cannot change and hashes by content: keeps a frozen spec really frozen (and
    hashable) while it still serialises and reads like the dict it was given as."""

    def _immutable(self, *args, **kwargs):
        raise TypeError("a spec's mappings cannot change: use PipelineSpec.replace")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _immutable
    __ior__ = _immutable

    def __hash__(self):
        return hash(frozenset(self.items()))

    def __reduce__(self):  # copy.deepcopy rebuilds it whole: its default refills with __setitem__
        return (FrozenDict, (dict(self),))


def _frozen(value):
    if isinstance(value, dict):
        return FrozenDict((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _unknown_key_message(key) -> str:
    near = difflib.get_close_matches(str(key), KEYS, n=1)
    hint = f"did you mean {near[0]!r}?" if near else f"known keys: {', '.join(KEYS)}"
    return f"spec: unknown key {key!r} ({hint})"


def _check_type(key, value, types, what):
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        raise InputError(f"{key}: expected {what}, got {value!r}")


def _as_tuple(types):
    return types if isinstance(types, tuple) else (types,)


def _one_of(key, value, choices):
    if value not in choices:
        raise InputError(f"{key}: {value!r} is not one of {', '.join(map(str, choices))}")


def _validated(spec: PipelineSpec) -> dict[str, Any]:
    """Check every key; return the normalised values that differ from what was given."""
    s = spec
    for key in ("model", "dataset", "split", "device", "input_device", "model_dtype"):
        _check_type(key, getattr(s, key), str, "a string")
    for key in ("revision", "dataset_config", "preprocess", "device_map"):
        if getattr(s, key) is not None:
            _check_type(key, getattr(s, key), str, "a string or null")
    for key in ("trust_remote_code", "with_labels"):
        _check_type(key, getattr(s, key), bool, "true or false")
    for key in ("samples", "batch_size"):
        _check_type(key, getattr(s, key), int, "a whole number")
        if getattr(s, key) < 1:
            raise InputError(f"{key}: must be at least 1, got {getattr(s, key)}")
    if s.dataset == "synthetic" and s.samples > SYNTHETIC_MAX_SAMPLES:
        raise InputError(f"samples: at most {SYNTHETIC_MAX_SAMPLES} with dataset 'synthetic', "
                         f"got {s.samples}")
    _one_of("task", s.task, TASKS)
    _one_of("format", s.format, ("torch", "python"))
    _one_of("input_cast", s.input_cast, ("floating", "all"))
    device = s.device.strip().lower()
    if not _is_device_name(device, allow_auto=True):
        raise InputError(f"device: {s.device!r} is not a device (auto, cpu, cuda, cuda:N, mps)")
    input_device = s.input_device.strip().lower()
    if input_device != "model" and not _is_device_name(input_device):
        raise InputError(f"input_device: {s.input_device!r} is not 'model' or a device name")
    if s.preprocess is not None:
        _check_preprocess(s.preprocess)
    _check_type("columns", s.columns, dict, "an object of role -> column name")
    for role, column in s.columns.items():
        _one_of("columns role", role, COLUMN_ROLES)
        _check_type(f"columns.{role}", column, str, "a column name")
    for key in ("keep_fp32", "run_in_float32"):
        _check_type(key, getattr(s, key), (list, tuple), "a list of module-name patterns")
        for pattern in getattr(s, key):
            _check_type(key, pattern, str, "module-name patterns (strings)")
    _check_type("applied_fixes", s.applied_fixes, (list, tuple), "a list")
    for item in s.applied_fixes:
        if not isinstance(item, dict) or not {"id", "title"} <= set(item):
            raise InputError("applied_fixes: each entry needs an 'id' and a 'title'")
        for key, kind, what in (("id", str, "a string"), ("title", str, "a string"),
                                ("edits", dict, "an object of spec keys"), ("explain", str, "a string")):
            if key in item:
                _check_type(f"applied_fixes.{key}", item[key], kind, what)
    autocast = dtypes.normalize(s.autocast, "autocast")
    if autocast == "float32":
        raise InputError("autocast: use float16 or bfloat16 (or null for no autocast)")
    label_dtype = s.label_dtype
    if label_dtype is not None:
        _check_type("label_dtype", label_dtype, str, "a dtype name or null")
        low = label_dtype.strip().lower()
        label_dtype = {"long": "int64", "torch.int64": "int64", "fp32": "float32",
                       "float": "float32", "torch.float32": "float32"}.get(low, low)
        _one_of("label_dtype", label_dtype, LABEL_DTYPES)
    autocast_device = s.autocast_device
    if autocast_device is not None:
        _check_type("autocast_device", autocast_device, str, "a device type or null")
        autocast_device = autocast_device.strip().lower()
        _one_of("autocast_device", autocast_device, DEVICE_TYPES)
    if s.sampling_rate is not None:
        _check_type("sampling_rate", s.sampling_rate, int, "a whole number of Hz or null")
        if s.sampling_rate < 1:
            raise InputError(f"sampling_rate: must be at least 1 Hz, got {s.sampling_rate}")
    return {
        "device": device,
        "input_device": input_device,
        "model_dtype": dtypes.normalize(s.model_dtype, "model_dtype", allow_auto=True),
        "map_dtype": dtypes.normalize(s.map_dtype, "map_dtype"),
        "format_dtype": dtypes.normalize(s.format_dtype, "format_dtype"),
        "input_dtype": dtypes.normalize(s.input_dtype, "input_dtype"),
        "autocast": autocast,
        "model_cast": dtypes.normalize(s.model_cast, "model_cast"),
        "label_dtype": label_dtype,
        "autocast_device": autocast_device,
        "keep_fp32": tuple(s.keep_fp32),
        "run_in_float32": tuple(s.run_in_float32),
        "applied_fixes": _frozen(s.applied_fixes),
        "columns": _frozen(s.columns),
        "train": _validated_train(s.train, s.with_labels),
    }


def _validated_train(train, with_labels: bool):
    """`train` with every field present and normalised (a FrozenDict), or None."""
    if train is None:
        return None
    _check_type("train", train, dict, "an object of training-step fields or null")
    unknown = sorted(set(train) - set(TRAIN_DEFAULTS), key=str)
    if unknown:
        near = difflib.get_close_matches(str(unknown[0]), TRAIN_DEFAULTS, n=1)
        hint = f"did you mean {near[0]!r}?" if near else f"known: {', '.join(TRAIN_DEFAULTS)}"
        raise InputError(f"train: unknown field {unknown[0]!r} ({hint})")
    if not with_labels:
        raise InputError("train: a training step needs a loss: set with_labels to true")
    t = dict(TRAIN_DEFAULTS, **train)
    _check_type("train.optimizer", t["optimizer"], str, "an optimizer name")
    optimizer = t["optimizer"].strip().lower().removeprefix("torch.optim.")
    _one_of("train.optimizer", optimizer, OPTIMIZERS)
    _check_type("train.lr", t["lr"], (int, float), "a number")
    if not 0 < t["lr"] < float("inf"):
        raise InputError(f"train.lr: must be a positive number, got {t['lr']!r}")
    for key in ("eps", "clip_grad_norm"):
        if t[key] is not None:
            _check_type(f"train.{key}", t[key], (int, float), "a number or null")
            if not 0 < t[key] < float("inf"):
                raise InputError(f"train.{key}: must be a positive number or null, got {t[key]!r}")
    _check_type("train.steps", t["steps"], int, "a whole number")
    if not 1 <= t["steps"] <= TRAIN_MAX_STEPS:
        raise InputError(f"train.steps: between 1 and {TRAIN_MAX_STEPS}, got {t['steps']}")
    for key in ("grad_scaler", "clip_before_unscale", "master_weights"):
        _check_type(f"train.{key}", t[key], bool, "true or false")
    fp8 = t["fp8"]
    if fp8 is not None:
        _check_type("train.fp8", fp8, str, "a recipe name (tensorwise, rowwise) or null")
        fp8 = parse_recipe(fp8, "train.fp8")
    _check_type("train.fp8_keep", t["fp8_keep"], (list, tuple), "a list of module names")
    for name in t["fp8_keep"]:
        _check_type("train.fp8_keep", name, str, "module names (strings)")
    return _frozen({
        "optimizer": optimizer, "lr": float(t["lr"]),
        "eps": None if t["eps"] is None else float(t["eps"]), "steps": t["steps"],
        "grad_scaler": t["grad_scaler"],
        "clip_grad_norm": None if t["clip_grad_norm"] is None else float(t["clip_grad_norm"]),
        "clip_before_unscale": t["clip_before_unscale"], "master_weights": t["master_weights"],
        # Kept once each, in the order given: a fix adds to the list.
        "fp8": fp8, "fp8_keep": tuple(dict.fromkeys(t["fp8_keep"]))})


def _check_preprocess(value: str) -> None:
    """`path/to/file.py:function`: the user's own file and a function name (CONTRACT §6)."""
    file, _, function = value.rpartition(":")
    if not file.lower().endswith(".py") or not function.isidentifier():
        raise InputError(f"preprocess: expected 'path/to/file.py:function' (a .py file and a "
                         f"function name), got {value!r}")


def _is_device_name(name: str, allow_auto: bool = False) -> bool:
    if allow_auto and name == "auto":
        return True
    if name in ("cpu", "cuda", "mps"):
        return True
    return name.startswith("cuda:") and name[5:].isdigit()
