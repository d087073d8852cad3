"""Reading the dataset and building one batch, step by step as the spec describes the pipeline.

Each step does what users write themselves (a cast inside `Dataset.map`, `with_format`, a
`DataLoader`, `.to(...)` on the batch), so their mistakes happen here too and can be diagnosed.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import audio, dtypes
from .errors import InputError, check_cancel, first_line
from .files import regular_file
from .hub import hub_went_silent, resolve_dataset_source, silent_message
from .spec import PipelineSpec

DATA_FILE_BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
AUDIO_SUFFIXES = audio.AUDIO_SUFFIXES
LABEL_NAMES = ("label", "labels", "class", "target", "category")
TEXT_NAMES = ("text", "sentence", "sentence1", "question", "premise", "content", "document")
PAIR_NAMES = ("text_pair", "sentence2", "context", "hypothesis", "passage")
SYNTHETIC_TEXTS = (
    "Half precision halves the memory of every weight.",
    "The model expected float16 but the batch held float32.",
    "A cast inside map is stored in Arrow and read back.",
    "Integer token ids must never be cast to a floating type.",
    "Autocast picks the precision of each operation for you.",
    "Overflow turns large activations into inf and then NaN.",
    "Bfloat16 keeps the range of float32 with fewer mantissa bits.",
    "Move the inputs to the device where the model lives.",
)


class PipelineFailure(Exception):
    """The user's pipeline itself failed at a stage (their code, their casts): a diagnosis result,
    not bad input. Carries the original exception."""

    def __init__(self, stage: str, exc: BaseException, facts: dict | None = None):
        super().__init__(f"{stage}: {exc}")
        self.stage = stage
        self.exc = exc
        self.facts = facts or {}


@dataclass
class ColumnFacts:
    """What happened to one batch entry on its way to the model."""

    name: str
    role: str | None = None          # text, text_pair, image, label; None for processor outputs
    stored: str | None = None        # dtype of the Arrow feature (what `map` stored)
    intended: str | None = None      # dtype a cast in `map` or the user's function asked for
    loaded: str | None = None        # dtype out of the DataLoader, or "list"
    final: str | None = None         # dtype fed to the model
    device: str | None = None
    shape: tuple | None = None


@dataclass
class BatchBuild:
    batch: dict
    columns: dict                     # role -> column name as resolved
    facts: dict = field(default_factory=dict)   # batch key -> ColumnFacts


@dataclass(frozen=True)
class DataSource:
    """Which reader a spec's `dataset` goes to; decided once, for the run and the export alike."""

    # synthetic, hub, saved / saved-dict (save_to_disk of a Dataset / DatasetDict), file,
    # images, audio (folders of such files), folder (of data files)
    kind: str
    path: Path | None = None
    builder: str | None = None  # the datasets builder of a file or folder of files


def data_source(spec: PipelineSpec) -> DataSource:
    """The reader for the spec's dataset, without touching the network or the user's code."""
    if spec.dataset == "synthetic":
        return DataSource("synthetic")
    local = spec.local_path(spec.dataset)
    return DataSource("hub") if local is None else local_source(local, spec.dataset)


def local_source(local: Path, name: str) -> DataSource:
    """A local path's reader: a save_to_disk folder, a data file, a folder of images, audio or
    data files. Anything but a folder must be a regular file (a FIFO would block the read)."""
    if not local.is_dir():
        regular_file(local, "dataset")
        builder = DATA_FILE_BUILDERS.get(local.suffix.lower())
        if builder is None:
            raise InputError(f"dataset {name!r}: unsupported file type "
                             f"(use {', '.join(DATA_FILE_BUILDERS)})")
        return DataSource("file", local, builder)
    if (local / "dataset_dict.json").is_file():
        return DataSource("saved-dict", local)
    if (local / "dataset_info.json").is_file():
        return DataSource("saved", local)
    media = folder_media(local)
    if media == "images":
        return DataSource("images", local, "imagefolder")
    if media == "audio":
        return DataSource("audio", local, "audiofolder")
    return DataSource("folder", local)


def load_rows(spec: PipelineSpec, config=None, processor=None):
    """The first `samples` rows of the split, as a `datasets.Dataset`."""
    import datasets

    if spec.dataset == "synthetic":
        ds = synthetic_rows(spec, config, processor)
    else:
        ds = _read_source(spec)
        if isinstance(ds, datasets.DatasetDict):
            if spec.split not in ds:
                raise InputError(f"dataset {spec.dataset!r} has no split {spec.split!r} "
                                 f"(splits: {', '.join(ds)})")
            ds = ds[spec.split]
    if len(ds) == 0:
        raise InputError(f"dataset {spec.dataset!r}: split {spec.split!r} has no rows")
    ds = ds.select(range(min(spec.samples, len(ds))))
    for column in ds.column_names:  # readable by every consumer (batch, preview, export)
        ds = audio.undecoded(ds, column)
    return ds


def _read_source(spec: PipelineSpec):
    import datasets

    source = data_source(spec)
    try:
        if source.kind == "hub":
            snapshot = resolve_dataset_source(spec.dataset, tried=spec.resolve_path(spec.dataset))
            if snapshot is None:  # online and not cached: let datasets fetch just the split
                return datasets.load_dataset(spec.dataset, spec.dataset_config,
                                             split=f"{spec.split}[:{spec.samples}]")
            source = local_source(Path(snapshot), spec.dataset)
        if source.kind == "file":
            return datasets.load_dataset(source.builder, data_files={spec.split: str(source.path)},
                                         split=spec.split)
        if source.kind in ("saved", "saved-dict"):
            return datasets.load_from_disk(str(source.path))
        if source.kind == "audio":  # datasets' audiofolder needs torchcodec: see core/audio.py
            return audio.folder_rows(source.path)
        if source.builder:
            return datasets.load_dataset(source.builder, data_dir=str(source.path),
                                         split=spec.split)
        return datasets.load_dataset(str(source.path), spec.dataset_config, split=spec.split)
    except InputError:
        raise
    except Exception as exc:
        if hub_went_silent():
            raise InputError(f"dataset {spec.dataset!r} could not be read: "
                             f"{silent_message()}") from None
        if not isinstance(exc, (ValueError, OSError, KeyError, ImportError, RuntimeError,
                                datasets.exceptions.DatasetsError)):
            raise
        # Files datasets cannot parse (empty, not UTF-8, broken JSON lines, a scalar JSON, a
        # dataset script, a folder with no decoder installed): the user's input, said in a line.
        raise InputError(f"dataset {spec.dataset!r} could not be read: "
                         f"{type(exc).__name__}: {first_line(exc)}") from None


def folder_media(folder: Path) -> str | None:
    """"images" or "audio" when the folder holds such files (before any data file), else None."""
    for path in folder.rglob("*"):
        suffix = path.suffix.lower()
        if suffix in IMAGE_SUFFIXES:
            return "images"
        if suffix in AUDIO_SUFFIXES:
            return "audio"
        if suffix in DATA_FILE_BUILDERS:
            return None
    return None


def synthetic_rows(spec: PipelineSpec, config, processor):
    """Rows made from the model config, for users with no data at hand (fixed seed)."""
    import datasets
    import numpy as np
    from PIL import Image

    n = spec.samples  # at most spec.SYNTHETIC_MAX_SAMPLES: the spec checks it
    num_labels = max(1, int(getattr(config, "num_labels", 2) or 2))
    labels = [i % num_labels for i in range(n)]
    if hasattr(processor, "tokenize") or hasattr(processor, "encode"):
        texts = [SYNTHETIC_TEXTS[i % len(SYNTHETIC_TEXTS)] for i in range(n)]
        return datasets.Dataset.from_dict({"text": texts, "label": labels})
    if hasattr(processor, "size") or getattr(config, "image_size", None):
        side = image_side(config, processor)
        rng = np.random.default_rng(0)
        images = [Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8))
                  for _ in range(n)]
        ds = datasets.Dataset.from_dict({"image": images, "label": labels})
        return ds.cast_column("image", datasets.Image())
    raise InputError("dataset 'synthetic' supports text and image models; give a dataset")


def image_side(config, processor) -> int:
    size = getattr(processor, "size", None) or {}
    if isinstance(size, dict):
        for key in ("height", "shortest_edge", "width"):
            if size.get(key):
                return int(size[key])
    side = getattr(config, "image_size", None)
    return int(side if isinstance(side, int) else 224)


def detect_columns(ds, spec: PipelineSpec) -> dict:
    """role -> column name: the spec's own choices first, then by feature type and name."""
    import datasets

    features = ds.features
    names = list(features)
    for role, column in spec.columns.items():
        if column not in features:
            raise InputError(f"columns.{role}: dataset has no column {column!r} "
                             f"(columns: {', '.join(names)})")
    roles = dict(spec.columns)
    taken = set(roles.values())

    def pick(role, test):
        if role in roles:
            return
        for name in names:
            if name not in taken and test(name, features[name]):
                roles[role] = name
                taken.add(name)
                return

    pick("image", lambda n, f: isinstance(f, datasets.Image))
    pick("audio", lambda n, f: isinstance(f, datasets.Audio))
    # A column named labels is what the model takes as such (a causal LM's labels = input_ids,
    # made by the preprocess), before any other label-like column.
    pick("label", lambda n, f: n == "labels" and (_feature_dtype(f) or "").startswith("int"))
    pick("label", lambda n, f: isinstance(f, datasets.ClassLabel))
    pick("label", lambda n, f: n.lower() in LABEL_NAMES and _is_int_value(f))
    # Class ids a CSV gives back as floats (0.0/1.0) are still the user's labels.
    pick("label", lambda n, f: n.lower() in LABEL_NAMES and isinstance(f, datasets.Value)
         and f.dtype.startswith("float"))
    is_text = lambda f: isinstance(f, datasets.Value) and f.dtype in ("string", "large_string")  # noqa: E731
    pick("text", lambda n, f: n.lower() in TEXT_NAMES and is_text(f))
    pick("text_pair", lambda n, f: n.lower() in PAIR_NAMES and is_text(f))
    pick("text", lambda n, f: is_text(f))
    return roles


def _is_int_value(feature) -> bool:
    import datasets

    return isinstance(feature, datasets.Value) and feature.dtype.startswith(("int", "uint", "bool"))


def load_user_function(spec: PipelineSpec):
    """The user's preprocess function, imported from their own .py file (never an installed
    module), wrapped so that its `sys.exit()` is a failure of the pipeline, not of fp16studio."""
    path, name = preprocess_file(spec), spec.preprocess.rpartition(":")[2]
    module_name = f"fp16studio_user_{path.stem}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        sys.modules[module_name] = module  # so datasets can pickle/hash the function
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's file failed to import: bad input
        raise InputError(f"preprocess: {path.name} failed to import: "
                         f"{type(exc).__name__}: {first_line(exc)}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise InputError(f"preprocess: {path.name} has no function {name!r}")
    return _UserFunction(function, name)


class _UserFunction:
    """The user's function; a `sys.exit()` inside it becomes an ordinary exception, so the run
    reports it instead of the whole command exiting quietly (a silent pass in CI)."""

    def __init__(self, function, name: str):
        self.function, self.name = function, name

    def __call__(self, *args, **kwargs):
        try:
            return self.function(*args, **kwargs)
        except SystemExit as exc:
            raise RuntimeError(f"preprocess function {self.name!r} called sys.exit({exc.code!r})") from None


def preprocess_file(spec: PipelineSpec) -> Path:
    """The user's own .py file the spec's preprocess names: a regular file, and not part of the
    installed Python library (CONTRACT §6)."""
    path = regular_file(spec.resolve_path(spec.preprocess.rpartition(":")[0]), "preprocess")
    library = installed_library(path)
    if library:
        raise InputError(f"preprocess: {path} is part of the installed Python library "
                         f"({library}), not your own code; name a function in your own .py file")
    return path


def installed_library(path: Path) -> str | None:
    """The library folder (stdlib, site-packages) that holds `path`, or None for the user's own."""
    import site
    import sysconfig

    folders = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    folders.add(site.getusersitepackages())
    resolved = path.resolve()
    for folder in folders:
        folder = Path(folder).resolve()
        if folder == resolved or folder in resolved.parents:
            return str(folder)
    # Another interpreter's library (/usr/lib/python3.11, a venv's site-packages) is no more
    # the user's own code than this one's.
    for parent in resolved.parents:
        if parent.name in ("site-packages", "dist-packages") or (
                re.fullmatch(r"python3(\.\d+)?", parent.name) and parent.parent.name.startswith("lib")):
            return str(parent)
    return None


def build_batch(spec: PipelineSpec, ds, processor, model_inputs: set, main_input: str,
                device, cancel=None) -> BatchBuild:
    """Run the data half of the pipeline and return the batch the model would receive."""
    import datasets
    import torch

    facts: dict[str, ColumnFacts] = {}
    try:
        if spec.preprocess:
            function = load_user_function(spec)
            # Call it once directly to see the half casts it makes before Arrow stores them.
            for key, value in dict(function(dict(ds[0]))).items():
                if torch.is_tensor(value) and dtypes.name_of(value.dtype) in dtypes.HALF_NAMES:
                    facts[key] = ColumnFacts(key, intended=dtypes.name_of(value.dtype))
            ds = ds.map(function)
        # After the preprocess: the columns it makes (labels = input_ids, a rename) count too.
        roles = detect_columns(ds, spec)
        check_cancel(cancel)
        check_roles(spec, ds.column_names, roles, processor, main_input)
        if main_input not in ds.column_names:
            ds = _apply_processor(spec, ds, processor, roles)
            if spec.map_dtype:
                for key, feature in ds.features.items():
                    if _feature_dtype(feature) and dtypes.is_floating_name(_feature_dtype(feature)):
                        facts.setdefault(key, ColumnFacts(key)).intended = spec.map_dtype
        ds = _select_model_columns(spec, ds, roles, model_inputs)
        for key, feature in ds.features.items():
            facts.setdefault(key, ColumnFacts(key)).stored = _feature_dtype(feature)
            if key == "labels":
                facts[key].role = "label"
        if spec.format == "torch":
            kwargs = {"dtype": dtypes.to_torch(spec.format_dtype)} if spec.format_dtype else {}
            ds = ds.with_format("torch", **kwargs)
        loader = torch.utils.data.DataLoader(ds, batch_size=spec.batch_size, shuffle=False)
        batch = dict(next(iter(loader)))
    except (InputError, datasets.exceptions.DatasetsError) as exc:
        raise exc if isinstance(exc, InputError) else InputError(first_line(exc)) from None
    except Exception as exc:  # the user's own code or casts failed: that is the diagnosis
        raise PipelineFailure("batch", exc, facts) from exc
    for key, value in batch.items():
        fact = facts.setdefault(key, ColumnFacts(key))
        fact.loaded = dtypes.name_of(value.dtype) if torch.is_tensor(value) else "list"
    try:
        batch = prepare_inputs(spec, batch, device, facts)
    except Exception as exc:
        raise PipelineFailure("batch", exc, facts) from exc
    return BatchBuild(batch=batch, columns=roles, facts=facts)


def prepare_inputs(spec: PipelineSpec, batch: dict, device, facts: dict) -> dict:
    """`input_dtype` / `input_cast`, then the move to `input_device`, as users write them."""
    import torch

    target = device if spec.input_device == "model" else torch.device(spec.input_device)
    out = {}
    for key, value in batch.items():
        if spec.input_dtype and (not torch.is_tensor(value) or value.is_floating_point()
                                 or spec.input_cast == "all"):
            # On a list this raises just what users see: 'list' object has no attribute 'to'.
            value = value.to(dtypes.to_torch(spec.input_dtype))
        out[key] = value.to(target)
    if spec.label_dtype and torch.is_tensor(out.get("labels")):
        # The user's labels.long() / labels.float() before the loss.
        out["labels"] = out["labels"].to(dtypes.to_torch(spec.label_dtype))
    for key, value in out.items():
        facts[key].final = dtypes.name_of(value.dtype)
        facts[key].device = str(value.device)
        facts[key].shape = tuple(value.shape)
    return out


def check_roles(spec: PipelineSpec, columns, roles: dict, processor, main_input: str):
    """Bad input the processor step would trip over, said before any work is done."""
    if spec.with_labels and "label" not in roles:
        raise InputError(f"with_labels is on, but dataset {spec.dataset!r} has no label column "
                         "(set columns.label)")
    if processor_roles(processor)[1:]:
        missing = [r for r in processor_roles(processor) if r not in roles]
        if missing and main_input not in columns:
            raise InputError(f"model {spec.model!r} takes {' and '.join(processor_roles(processor))}"
                             f" together, but dataset {spec.dataset!r} has no {missing[0]} column "
                             f"(columns: {', '.join(columns)}); set columns.{missing[0]}")
        return
    wants = processor_input(processor)
    rate = getattr(processor, "sampling_rate", None)
    if wants == "audio" and spec.sampling_rate and rate and spec.sampling_rate != rate:
        # The extractor would refuse it with a multi-line message; say it in one.
        raise InputError(f"sampling_rate is {spec.sampling_rate} but the model's feature "
                         f"extractor takes {rate} Hz audio: set sampling_rate to {rate} (or null)")
    if main_input in columns or wants in roles:
        return
    media = [role for role in ("text", "image", "audio") if role in roles]
    if media:
        raise InputError(f"model {spec.model!r} takes {wants} (its processor is "
                         f"{type(processor).__name__}), but dataset {spec.dataset!r} has "
                         f"{' and '.join(media)}, no {wants} column: pick a {wants} dataset or "
                         f"a model for {media[0]}")
    raise InputError(f"dataset {spec.dataset!r}: no {wants} column to process "
                     f"(columns: {', '.join(columns)}); set columns.{wants}")


def processor_roles(processor) -> tuple:
    """The roles a processor takes: ("text", "image") or ("text", "audio") for a multimodal
    processor (a tokenizer beside an image processor or feature extractor), else one."""
    if getattr(processor, "tokenizer", None) is not None:
        if getattr(processor, "image_processor", None) is not None:
            return ("text", "image")
        if getattr(processor, "feature_extractor", None) is not None:
            return ("text", "audio")
    return (processor_input(processor),)


def processor_input(processor) -> str:
    """The role a processor makes the model's main input from: text, image or audio."""
    if hasattr(processor, "sampling_rate") and hasattr(processor, "feature_size"):
        return "audio"
    if hasattr(processor, "tokenize") or hasattr(processor, "encode"):
        return "text"
    return "image"


def _apply_processor(spec: PipelineSpec, ds, processor, roles: dict):
    import torch

    map_dtype = dtypes.to_torch(spec.map_dtype) if spec.map_dtype else None
    image, text, pair = roles.get("image"), roles.get("text"), roles.get("text_pair")
    wants = processor_input(processor)
    rate = spec.sampling_rate or getattr(
        getattr(processor, "feature_extractor", processor), "sampling_rate", None)

    def process(rows):
        if processor_roles(processor)[1:]:
            # A multimodal processor gets every medium at once, as users call it.
            out = processor(text=rows[text], padding=True, truncation=True, return_tensors="pt",
                            **_media_kwargs(processor, rows, roles, rate))
        elif wants == "audio":
            arrays = [audio.decode(value, rate) for value in rows[roles["audio"]]]
            out = processor(arrays, sampling_rate=rate, return_tensors="pt",
                            **audio.extractor_kwargs(processor))
        elif image is not None and wants == "image":
            out = processor(images=[img.convert("RGB") for img in rows[image]], return_tensors="pt")
        else:
            args = (rows[text], rows[pair]) if pair else (rows[text],)
            out = processor(*args, padding=True, truncation=True, return_tensors="pt")
        out = dict(out)
        if map_dtype is not None:
            # What users write inside map; datasets stores it in Arrow and may give float32 back.
            out = {k: v.to(map_dtype) if torch.is_tensor(v) and v.is_floating_point() else v
                   for k, v in out.items()}
        return out

    # One map call over all rows, so text pads to one length and the batch collates.
    return ds.map(process, batched=True, batch_size=None)


def _media_kwargs(processor, rows, roles: dict, rate) -> dict:
    if processor_roles(processor)[1] == "image":
        return {"images": [img.convert("RGB") for img in rows[roles["image"]]]}
    return {"audio": [audio.decode(value, rate) for value in rows[roles["audio"]]],
            "sampling_rate": rate}


def _select_model_columns(spec: PipelineSpec, ds, roles: dict, model_inputs: set):
    label = roles.get("label")
    if spec.with_labels:
        if label != "labels":
            if "labels" in ds.column_names:
                ds = ds.remove_columns("labels")
            ds = ds.rename_column(label, "labels")
    keep = set(model_inputs) | ({"labels"} if spec.with_labels else set())
    drop = [c for c in ds.column_names if c not in keep]
    return ds.remove_columns(drop) if drop else ds


def _feature_dtype(feature) -> str | None:
    """The scalar dtype inside an Arrow feature (Value, List, Sequence, ArrayXD, ClassLabel)."""
    import datasets

    if isinstance(feature, datasets.ClassLabel):
        return "int64"
    if isinstance(feature, datasets.Value):
        return feature.dtype
    inner = getattr(feature, "feature", None)
    if inner is not None:
        return _feature_dtype(inner)
    return getattr(feature, "dtype", None)
