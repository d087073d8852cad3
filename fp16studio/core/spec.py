"""The pipeline spec: the single source of truth for one pipeline (CONTRACT §1).

A spec describes the pipeline as the user wrote it, mistakes included. It is immutable; a fix
is an edit that returns a new spec (`PipelineSpec.replace`), which makes undo a stack of specs.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import dtypes
from .errors import InputError

TASKS = ("auto", "image-classification", "sequence-classification", "feature-extraction",
         "causal-lm", "seq2seq-lm")
COLUMN_ROLES = ("text", "text_pair", "image", "label")
DEMO_PREFIX = "demo:"


@dataclass(frozen=True)
class PipelineSpec:
    model: str
    dataset: str
    revision: str | None = None
    task: str = "auto"
    trust_remote_code: bool = False
    dataset_config: str | None = None
    split: str = "train"
    columns: dict = field(default_factory=dict)
    samples: int = 8
    batch_size: int = 4
    preprocess: str | None = None
    map_dtype: str | None = None
    format: str = "torch"
    format_dtype: str | None = None
    device: str = "auto"
    device_map: str | None = None
    model_dtype: str = "float32"
    keep_fp32: tuple = ()
    input_dtype: str | None = None
    input_cast: str = "floating"
    input_device: str = "model"
    autocast: str | None = None
    with_labels: bool = False
    # Fixes applied so far, oldest first: [{"id", "title"}]. The export names each in a comment.
    applied_fixes: tuple = ()
    # Folder that relative paths (model, dataset, preprocess) are read from; not part of the
    # document, so a saved spec stays portable.
    base_dir: str | None = field(default=None, compare=False, repr=False)

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
            raise InputError(f"spec: unknown key {unknown[0]!r} (known keys: {', '.join(KEYS)})")
        for required in ("model", "dataset"):
            if not data.get(required):
                raise InputError(f"spec: {required!r} is required")
        return cls(**data, base_dir=str(base_dir) if base_dir is not None else None)

    @classmethod
    def load(cls, source: str | Path) -> "PipelineSpec":
        """Read a spec from a .json/.toml file, or `demo:NAME` for a built-in demo."""
        text = str(source)
        if text.startswith(DEMO_PREFIX):
            from .demo import demo_spec

            return demo_spec(text[len(DEMO_PREFIX):])
        path = Path(text)
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read spec {text}: {exc.strerror or exc}") from None
        data = _parse(raw, path)
        # A saved session wraps its spec: {"fp16studio_session": 1, "spec": {...}, ...}.
        if isinstance(data, dict) and "spec" in data and "fp16studio_session" in data:
            data = data["spec"]
        return cls.from_dict(data, base_dir=path.resolve().parent)

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for key in KEYS:
            value = getattr(self, key)
            if isinstance(value, tuple):
                value = [dict(v) if isinstance(v, dict) else v for v in value]
            elif isinstance(value, dict):
                value = dict(value)
            out[key] = value
        return out

    def save(self, path: str | Path) -> None:
        """Write the spec as JSON, atomically so an interrupted save never loses the old file."""
        path = Path(path)
        data = self.rebased(path.resolve().parent).to_dict()
        write_text_atomic(path, json.dumps(data, indent=2) + "\n")

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
            if local is not None and not Path(file_part).expanduser().is_absolute():
                edits[key] = str(local.resolve()) + sep + function
        return dataclasses.replace(self, **edits, base_dir=str(folder))

    def replace(self, **edits) -> "PipelineSpec":
        unknown = sorted(set(edits) - set(KEYS))
        if unknown:
            raise InputError(f"spec: unknown key {unknown[0]!r}")
        return dataclasses.replace(self, **edits)

    # -- paths ----------------------------------------------------------------------------------
    def resolve_path(self, value: str) -> Path:
        """A path from the spec, relative to the spec's folder when it is not absolute."""
        path = Path(value).expanduser()
        if not path.is_absolute() and self.base_dir:
            path = Path(self.base_dir) / path
        return path

    def local_path(self, value: str) -> Path | None:
        """The path if `value` names something that exists locally, else None (a Hub id)."""
        path = self.resolve_path(value)
        return path if path.exists() else None


KEYS = tuple(f.name for f in dataclasses.fields(PipelineSpec) if f.name != "base_dir")


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _parse(raw: str, path: Path):
    if path.suffix.lower() == ".toml":
        import tomllib

        try:
            return tomllib.loads(raw)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"spec {path}: not valid TOML ({exc})") from None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InputError(f"spec {path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None


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
    for key in ("model", "dataset", "split", "device", "input_device"):
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
    _one_of("task", s.task, TASKS)
    _one_of("format", s.format, ("torch", "python"))
    _one_of("input_cast", s.input_cast, ("floating", "all"))
    device = s.device.strip().lower()
    if not _is_device_name(device, allow_auto=True):
        raise InputError(f"device: {s.device!r} is not a device (auto, cpu, cuda, cuda:N, mps)")
    input_device = s.input_device.strip().lower()
    if input_device != "model" and not _is_device_name(input_device):
        raise InputError(f"input_device: {s.input_device!r} is not 'model' or a device name")
    if s.preprocess is not None and not all(s.preprocess.rpartition(":")[::2]):
        raise InputError(f"preprocess: expected 'path/to/file.py:function', got {s.preprocess!r}")
    _check_type("columns", s.columns, dict, "an object of role -> column name")
    for role, column in s.columns.items():
        _one_of("columns role", role, COLUMN_ROLES)
        _check_type(f"columns.{role}", column, str, "a column name")
    _check_type("keep_fp32", s.keep_fp32, (list, tuple), "a list of module-name patterns")
    for pattern in s.keep_fp32:
        _check_type("keep_fp32", pattern, str, "module-name patterns (strings)")
    _check_type("applied_fixes", s.applied_fixes, (list, tuple), "a list")
    for item in s.applied_fixes:
        if not isinstance(item, dict) or not {"id", "title"} <= set(item):
            raise InputError("applied_fixes: each entry needs an 'id' and a 'title'")
    autocast = dtypes.normalize(s.autocast, "autocast")
    if autocast == "float32":
        raise InputError("autocast: use float16 or bfloat16 (or null for no autocast)")
    return {
        "device": device,
        "input_device": input_device,
        "model_dtype": dtypes.normalize(s.model_dtype, "model_dtype", allow_auto=True),
        "map_dtype": dtypes.normalize(s.map_dtype, "map_dtype"),
        "format_dtype": dtypes.normalize(s.format_dtype, "format_dtype"),
        "input_dtype": dtypes.normalize(s.input_dtype, "input_dtype"),
        "autocast": autocast,
        "keep_fp32": tuple(s.keep_fp32),
        "applied_fixes": tuple(dict(item) for item in s.applied_fixes),
        "columns": dict(s.columns),
    }


def _is_device_name(name: str, allow_auto: bool = False) -> bool:
    if allow_auto and name == "auto":
        return True
    if name in ("cpu", "cuda", "mps"):
        return True
    return name.startswith("cuda:") and name[5:].isdigit()
