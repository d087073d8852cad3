"""Where a pipeline's rows come from: a local folder (save_to_disk, data files, images or audio),
a data file, a Hub dataset, or rows made up from the model config (`synthetic`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..common.errors import InputError, first_line, raise_if_disk_full
from ..common.files import regular_file
from ..hf.hub import hub_went_silent, resolve_dataset_source, silent_message
from ..spec.value import PipelineSpec
from . import audio


DATA_FILE_BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}
AUDIO_SUFFIXES = audio.AUDIO_SUFFIXES
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
    # datasets logs a parse failure before raising it: the one line is ours, below.
    quiet = logging.getLogger("datasets")
    level, quiet.level = quiet.level, logging.CRITICAL
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
        raise_if_disk_full(exc)   # datasets writing its cache
        if hub_went_silent():
            raise InputError(f"dataset {spec.dataset!r} could not be read: "
                             f"{silent_message()}") from None
        if not isinstance(exc, (ValueError, OSError, KeyError, ImportError, RuntimeError,
                                datasets.exceptions.DatasetsError)):
            raise
        # Files datasets cannot parse (empty, not UTF-8, broken JSON lines, a scalar JSON, a
        # dataset script, a folder with no decoder installed): the user's input, said in a line.
        cause = root_cause(exc)  # datasets wraps the parser's own error in a generic one
        raise InputError(f"dataset {spec.dataset!r} could not be read: "
                         f"{type(cause).__name__}: {first_line(cause)}") from None
    finally:
        quiet.setLevel(level)


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of an explicit chain (`raise ... from`): what a wrapper wraps."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


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


def synthetic_plan(config, processor) -> dict:
    """What `dataset: synthetic` makes for this model, decided once for the run and the export:
    {"kind": "text" or "image", "num_labels", and for images "side"}."""
    num_labels = max(1, int(getattr(config, "num_labels", 2) or 2))
    if hasattr(processor, "tokenize") or hasattr(processor, "encode"):
        return {"kind": "text", "num_labels": num_labels}
    if hasattr(processor, "size") or getattr(config, "image_size", None):
        return {"kind": "image", "num_labels": num_labels, "side": image_side(config, processor)}
    raise InputError("dataset 'synthetic' supports text and image models; give a dataset")


def synthetic_rows(spec: PipelineSpec, config, processor):
    """Rows made from the model config, for users with no data at hand (fixed seed)."""
    import datasets
    import numpy as np
    from PIL import Image

    plan = synthetic_plan(config, processor)
    n = spec.samples  # at most spec.SYNTHETIC_MAX_SAMPLES: the spec checks it
    labels = [i % plan["num_labels"] for i in range(n)]
    if plan["kind"] == "text":
        texts = [SYNTHETIC_TEXTS[i % len(SYNTHETIC_TEXTS)] for i in range(n)]
        return datasets.Dataset.from_dict({"text": texts, "label": labels})
    side = plan["side"]
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8))
              for _ in range(n)]
    ds = datasets.Dataset.from_dict({"image": images, "label": labels})
    return ds.cast_column("image", datasets.Image())


def image_side(config, processor) -> int:
    size = getattr(processor, "size", None) or {}
    if isinstance(size, dict):
        for key in ("height", "shortest_edge", "width"):
            if size.get(key):
                return int(size[key])
    side = getattr(config, "image_size", None)
    return int(side if isinstance(side, int) else 224)
