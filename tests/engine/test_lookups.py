"""Picker look-ups: safetensors headers, model info, the cache scan, offline Hub search."""

import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

from fp16studio.core import InputError, PipelineSpec
from fp16studio.engine import lookups


@pytest.fixture
def checkpoint(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    save_file({"a": np.zeros((4, 4), np.float16), "b": np.zeros(3, np.float32),
               "c": np.zeros(2, np.int64)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text("{}")
    return folder


def test_dtypes_come_from_the_header_alone(checkpoint):
    from fp16studio.core.hf.checkpoint import safetensors_header_dtypes

    assert sorted(safetensors_header_dtypes(checkpoint / "model.safetensors")) == [
        "float16", "float32", "int64"]


def test_model_info_sums_sizes_and_counts_dtypes(checkpoint):
    info = lookups.model_info(PipelineSpec(model=str(checkpoint), dataset="synthetic"))
    assert info["dtypes"] == {"float16": 1, "float32": 1, "int64": 1}
    assert info["bytes"] == (checkpoint / "model.safetensors").stat().st_size
    assert info["format"] == "safetensors"


def test_model_info_on_a_missing_model_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not in the cache"):
        lookups.model_info(PipelineSpec(model="nobody/nothing-here", dataset="synthetic"))


def test_a_file_that_is_not_safetensors_is_refused(tmp_path):
    bogus = tmp_path / "x.safetensors"
    bogus.write_bytes(b"\xff" * 16)
    from fp16studio.core.hf.checkpoint import safetensors_header_dtypes

    with pytest.raises(InputError, match="not a readable safetensors file"):
        safetensors_header_dtypes(bogus)


def fake_cached_repo(cache, repo_type, repo_id):
    """The Hugging Face cache layout for one repo with one file."""
    folder = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / "f00d").write_text("{}")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("abc")
    (folder / "snapshots" / "abc").mkdir(parents=True)
    (folder / "snapshots" / "abc" / "config.json").symlink_to(folder / "blobs" / "f00d")


def test_cache_scan_lists_models_and_datasets(tmp_path):
    fake_cached_repo(tmp_path, "model", "org/Tiny")
    fake_cached_repo(tmp_path, "model", "org/another")
    fake_cached_repo(tmp_path, "dataset", "org/images")
    assert lookups.scan_cache(str(tmp_path)) == {"models": ["org/another", "org/Tiny"],
                                                 "datasets": ["org/images"]}
    assert lookups.scan_cache(str(tmp_path / "missing")) == {"models": [], "datasets": []}


def test_cache_scan_lists_what_huggingface_hub_lists(tmp_path):
    """The folder names read as huggingface_hub's own scan reads them: a repo with snapshots,
    not its lock folder, a stray file, a repo whose download never made a snapshot, a space."""
    from huggingface_hub import scan_cache_dir

    fake_cached_repo(tmp_path, "model", "org/Tiny")
    fake_cached_repo(tmp_path, "dataset", "someone/rows")
    fake_cached_repo(tmp_path, "space", "org/demo")
    (tmp_path / ".locks" / "models--org--Tiny").mkdir(parents=True)
    (tmp_path / "models--org--unfinished" / "blobs").mkdir(parents=True)
    (tmp_path / "version.txt").write_text("1")
    listed = {"models": [], "datasets": []}
    for repo in scan_cache_dir(tmp_path).repos:
        if repo.repo_type in ("model", "dataset"):
            listed[repo.repo_type + "s"].append(repo.repo_id)
    assert lookups.scan_cache(str(tmp_path)) == listed == {"models": ["org/Tiny"], "datasets": ["someone/rows"]}


def test_the_cache_scan_leaves_huggingface_hubs_scanner_unimported(tmp_path):
    """The scan runs on a thread of the window's process at start-up: huggingface_hub's
    scanner's import alone held the GIL for 100 ms of CPU there."""
    fake_cached_repo(tmp_path, "model", "org/Tiny")
    code = ("import sys; from fp16studio.engine import lookups; "
            f"print(lookups.scan_cache({str(tmp_path)!r})['models'], "
            "'huggingface_hub.utils._cache_manager' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["['org/Tiny']", "False"]


def test_hub_search_is_empty_offline():
    assert lookups.hub_search("bert") == []          # HF_HUB_OFFLINE=1 in tests


def test_synthetic_dataset_has_a_note_instead_of_rows():
    preview = lookups.dataset_preview(PipelineSpec(model="m", dataset="synthetic"))
    assert preview.rows == [] and "config" in preview.note


CARD = """---
configs:
- config_name: small
  data_files: small.csv
- config_name: large
  data_files: large.csv
---
# Two configs
"""


def test_configs_come_from_the_dataset_card(tmp_path):
    (tmp_path / "README.md").write_text(CARD)
    spec = PipelineSpec(model="m", dataset=str(tmp_path))
    assert lookups.dataset_configs(spec) == ["small", "large"]


def test_a_card_without_configs_offers_none(tmp_path):
    (tmp_path / "README.md").write_text("# no metadata\n")
    assert lookups.dataset_configs(PipelineSpec(model="m", dataset=str(tmp_path))) == []
    assert lookups.dataset_configs(PipelineSpec(model="m", dataset="synthetic")) == []


def test_preview_offers_the_configs_when_the_rows_cannot_be_read(tmp_path):
    (tmp_path / "README.md").write_text(CARD)   # and no data files at all
    preview = lookups.dataset_preview(PipelineSpec(model="m", dataset=str(tmp_path)))
    assert preview.configs == ["small", "large"] and preview.rows == []
    assert preview.note
