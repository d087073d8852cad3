"""Qt-free look-ups behind the model and dataset pickers. The cache scan, model info and Hub
search run on the window's look-up pool (gui/lookup_pool.py, a thread of the window's process:
what they import and hold the GIL for, the window waits for), or in the engine on a remote box;
the dataset preview runs in the engine process.

They read local files and the Hugging Face cache, and touch the network only when the Hub is
reachable (fp16studio.core.hf.hub decides), so a picker never hangs a machine that is offline.
"""

from __future__ import annotations

import io
import json
import os
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from dataclasses import dataclass, field

from fp16studio.core import InputError
from fp16studio.core.common.codec import Document

HUB_SEARCH_TIMEOUT_S = 5.0
HUB_SEARCH_LIMIT = 20
PREVIEW_ROWS = 6
THUMBNAIL_PX = 56


@dataclass(frozen=True)
class Thumbnail(Document):
    """An image cell of the preview: a PNG thumbnail, and the image's own size ("W×H")."""

    png: bytes
    size: str


@dataclass(frozen=True)
class DatasetPreview(Document):
    """The first rows of a split, for the preview table (see `dataset_preview`)."""

    columns: list[str] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)      # role -> column
    configs: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    rows: list[list[str | Thumbnail]] = field(default_factory=list)
    features: dict[str, str] = field(default_factory=dict)   # column -> its datasets feature
    note: str = ""               # why no rows could be read


def scan_cache(cache_dir: str | None = None) -> dict:
    """Repo ids in the local Hugging Face cache: {"models": [...], "datasets": [...]}.

    Read from the cache's folder names, as huggingface_hub's scan_cache_dir lists its repos (a
    `models--org--name` folder with a `snapshots` folder), without it: its import took 100 ms
    of CPU and it walks every cached file, on a thread of the window's process at start-up,
    holding the GIL the window waits for. Only the ids are wanted."""
    if cache_dir is None:
        from huggingface_hub import constants

        cache_dir = constants.HF_HUB_CACHE
    found: dict[str, list[str]] = {"models": [], "datasets": []}
    try:
        entries = list(os.scandir(cache_dir))
    except OSError:   # no cache folder yet, or one we cannot read: nothing to complete from
        return found
    for entry in entries:
        kind, _, name = entry.name.partition("--")
        if kind in found and name and os.path.isdir(os.path.join(entry.path, "snapshots")):
            found[kind].append(name.replace("--", "/"))
    return {key: sorted(ids, key=str.lower) for key, ids in found.items()}


def hub_search(query: str, repo_type: str = "model") -> list[str]:
    """Hub repo ids matching `query`, or [] when offline; never waits more than a few seconds."""
    from fp16studio.core.hf.hub import online

    if not online():
        return []

    def search():
        from huggingface_hub import HfApi

        api = HfApi()
        listing = (api.list_models if repo_type == "model" else api.list_datasets)(
            search=query, limit=HUB_SEARCH_LIMIT)
        return [item.id for item in listing]

    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(search).result(timeout=HUB_SEARCH_TIMEOUT_S)
    except FutureTimeout:
        return []
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def source_folder(spec, value: str, repo_type: str, revision: str | None = None) -> Path | None:
    """The local folder of a model or dataset: the path itself, or the cached snapshot of a Hub
    id (never downloaded); None for a file, or a repo that is not cached."""
    from fp16studio.core.hf.hub import cached_snapshot, looks_like_repo_id

    local = spec.local_path(value)
    if local is not None:
        return local if local.is_dir() else None
    if looks_like_repo_id(value):
        snapshot = cached_snapshot(value, repo_type, revision)
        return Path(snapshot) if snapshot else None
    return None


def model_folder(spec) -> Path | None:
    return source_folder(spec, spec.model, "model", spec.revision)


def model_info(spec) -> dict:
    """Checkpoint size and dtypes, from the safetensors headers alone (no weights read)."""
    from fp16studio.core.hf.checkpoint import checkpoint_dtypes

    folder = model_folder(spec)
    if folder is None:
        raise InputError(f"model {spec.model!r}: not a local folder and not in the cache")
    files = sorted(folder.glob("*.safetensors"))
    dtypes = checkpoint_dtypes(folder) or {}
    size = sum(f.stat().st_size for f in files) or sum(
        f.stat().st_size for f in folder.glob("*.bin"))
    return {"folder": str(folder), "bytes": size, "dtypes": dtypes,
            "format": "safetensors" if files else ("bin" if size else "none")}


def dataset_splits(spec) -> list[str]:
    """Split names for the dataset chooser, where they can be known without downloading."""
    local = spec.local_path(spec.dataset)
    if local is not None:
        manifest = local / "dataset_dict.json"
        if manifest.is_file():
            return list(json.loads(manifest.read_text(encoding="utf-8")).get("splits", []))
        return [spec.split]
    from fp16studio.core.hf.hub import online

    if spec.dataset == "synthetic" or not online():
        return [spec.split]
    import datasets

    return datasets.get_dataset_split_names(spec.dataset, spec.dataset_config)


def dataset_configs(spec) -> list[str]:
    """Config names for the dataset chooser: from the dataset card's `configs:` metadata (a
    local folder or the cached snapshot), else from the Hub when it is reachable. (`revision`
    is the model's: datasets are read at their default revision.)"""
    from fp16studio.core.hf.hub import looks_like_repo_id, online

    if spec.dataset == "synthetic":
        return []
    folder = source_folder(spec, spec.dataset, "dataset")
    card = folder / "README.md" if folder else None
    if card is not None and card.is_file():
        from huggingface_hub.repocard import metadata_load

        configs = (metadata_load(card) or {}).get("configs") or []
        names = [c["config_name"] for c in configs if isinstance(c, dict) and c.get("config_name")]
        if names:
            return names
    if spec.local_path(spec.dataset) is None and looks_like_repo_id(spec.dataset) and online():
        import datasets

        return list(datasets.get_dataset_config_names(spec.dataset))
    return []


def dataset_preview(spec) -> DatasetPreview:
    """The first rows of the split for the preview table, images as PNG thumbnails.

    A cell is a short string or a Thumbnail for an image. When
    the rows cannot be read (often: the dataset needs a config), "note" says why and the
    configs are still offered.
    """
    from fp16studio.core.data.columns import detect_columns
    from fp16studio.core.data.sources import load_rows

    if spec.dataset == "synthetic":
        return DatasetPreview(splits=[spec.split], note="Synthetic inputs are made from the "
                                                        "model's config when the pipeline runs.")
    configs = dataset_configs(spec)
    try:
        rows = load_rows(spec.replace(samples=min(spec.samples, PREVIEW_ROWS)))
    except InputError as exc:
        if not configs:
            raise
        return DatasetPreview(configs=configs, splits=[spec.split], note=str(exc))
    columns = list(rows.features)
    table = [[_cell(row[name]) for name in columns] for row in rows]
    return DatasetPreview(columns, detect_columns(rows, spec), configs, dataset_splits(spec), table,
                          {name: str(feature) for name, feature in rows.features.items()})


def _cell(value):
    if hasattr(value, "thumbnail") and hasattr(value, "save"):  # a PIL image
        image = value.convert("RGB")
        image.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        return Thumbnail(buffer.getvalue(), f"{value.width}×{value.height}")
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 120 else text[:117] + "…"


def engine_report() -> dict:
    """Where the engine runs, for the window's status bar: the machine, its fp16studio, torch,
    CUDA, and each GPU with its memory used and total (bytes), read there."""
    import platform
    import socket

    import torch

    from fp16studio import __version__

    cuda = torch.cuda.is_available()
    return {"host": socket.gethostname(), "fp16studio": __version__,
            "python": platform.python_version(), "torch": str(torch.__version__),
            "transformers": _installed("transformers"),
            "cuda": torch.version.cuda if cuda else None, "gpus": _gpus() if cuda else []}


def _installed(distribution: str) -> str | None:
    """Its installed version, read from its metadata (not imported), or None."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


GPU_QUERY = ("nvidia-smi", "--query-gpu=name,memory.used,memory.total",
             "--format=csv,noheader,nounits")
MIB = 1 << 20


def _gpus() -> list[dict]:
    """Each GPU's name and memory: from nvidia-smi where there is one (every process's use,
    and no CUDA context made for asking), else torch's free/total per device."""
    import subprocess

    try:
        answer = subprocess.run(GPU_QUERY, capture_output=True, text=True, timeout=10)
        if answer.returncode == 0:
            return parse_gpu_query(answer.stdout)
    except (OSError, subprocess.TimeoutExpired):
        pass
    import torch

    gpus = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        gpus.append({"name": torch.cuda.get_device_name(index), "used": total - free,
                     "total": total})
    return gpus


def parse_gpu_query(text: str) -> list[dict]:
    """nvidia-smi's `name, used MiB, total MiB` lines as [{"name", "used", "total"}] in bytes."""
    gpus = []
    for line in text.splitlines():
        parts = [part.strip() for part in line.rsplit(",", 2)]
        if len(parts) != 3:
            continue
        name, used, total = parts
        try:
            gpus.append({"name": name, "used": int(float(used)) * MIB,
                         "total": int(float(total)) * MIB})
        except ValueError:   # "[N/A]" on some boards: the name still says which GPU
            gpus.append({"name": name, "used": None, "total": None})
    return gpus
