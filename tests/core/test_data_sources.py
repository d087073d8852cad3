"""Real sources: data files, image folders, save_to_disk, synthetic rows, the offline HF cache,
and the real all-MiniLM-L6-v2."""

import json
import re
import shutil

import pytest

from fp16studio.core import InputError, PipelineSpec, diagnose
from fp16studio.core.run.pipeline import forward, prepare

TEXTS = ["half precision", "float16 weights", "a cast inside map", "token ids stay integer"]


def text_spec(demo_dir, dataset, **keys):
    return PipelineSpec.from_dict({"model": str(demo_dir / "models/tiny-bert"),
                                   "dataset": str(dataset), **keys})


@pytest.fixture(scope="module")
def text_files(tmp_path_factory):
    import datasets

    folder = tmp_path_factory.mktemp("texts")
    ds = datasets.Dataset.from_dict({"sentence": TEXTS, "target": [0, 1, 2, 0]})
    ds.to_csv(str(folder / "rows.csv"))
    ds.to_parquet(str(folder / "rows.parquet"))
    ds.to_json(str(folder / "rows.jsonl"))
    ds.save_to_disk(str(folder / "saved"))
    return folder


@pytest.mark.parametrize("name", ["rows.csv", "rows.parquet", "rows.jsonl", "saved"])
def test_text_sources_detect_columns_by_name(demo_dir, text_files, name):
    prepared = prepare(text_spec(demo_dir, text_files / name, with_labels=True))
    assert prepared.columns == {"text": "sentence", "label": "target"}
    assert prepared.batch["labels"].tolist() == [0, 1, 2, 0]
    assert prepared.batch["input_ids"].dtype.is_floating_point is False


def test_column_roles_can_be_overridden(demo_dir, text_files):
    spec = text_spec(demo_dir, text_files / "rows.csv", columns={"text": "sentence"},
                     samples=2, batch_size=2)
    assert prepare(spec).batch["input_ids"].shape[0] == 2


def test_image_folder(demo_dir, tmp_path):
    import numpy as np
    from PIL import Image

    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        for i in range(2):
            pixels = np.full((36, 36, 3), 40 * i, dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / label / f"{i}.png")
    spec = PipelineSpec(model=str(demo_dir / "models/tiny-resnet"), dataset=str(tmp_path),
                        with_labels=True)
    prepared = prepare(spec)
    assert prepared.columns["image"] == "image" and prepared.columns["label"] == "label"
    assert tuple(prepared.batch["pixel_values"].shape) == (4, 3, 32, 32)


@pytest.mark.parametrize("model", ["models/tiny-bert", "models/tiny-resnet"])
def test_synthetic_rows_from_the_config(demo_dir, model):
    report = diagnose(PipelineSpec(model=str(demo_dir / model), dataset="synthetic"))
    assert report.ok and report.output.shape == [4, 3]


def test_user_function_failure_is_a_pipeline_error_not_bad_input(demo_dir, tmp_path):
    (tmp_path / "pre.py").write_text("def broken(example):\n    raise KeyError('img')\n")
    spec = PipelineSpec(model=str(demo_dir / "models/tiny-resnet"),
                        dataset=str(demo_dir / "data/images"), preprocess="pre.py:broken",
                        base_dir=str(tmp_path))
    report = diagnose(spec)
    assert not report.ok and report.error.stage == "batch"
    assert report.error.type == "KeyError"


def test_user_file_that_does_not_import_is_bad_input(demo_dir, tmp_path):
    (tmp_path / "pre.py").write_text("this is not python\n")
    spec = PipelineSpec(model=str(demo_dir / "models/tiny-resnet"),
                        dataset=str(demo_dir / "data/images"), preprocess="pre.py:f",
                        base_dir=str(tmp_path))
    with pytest.raises(InputError, match="failed to import"):
        diagnose(spec)


def _fake_hub_cache(cache, repo_type, repo_id, source):
    """The layout huggingface_hub reads offline: refs/main -> snapshots/<commit>/files."""
    commit = "0" * 40
    folder = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    shutil.copytree(source, folder / "snapshots" / commit)


def test_offline_hub_ids_load_from_the_cache(demo_dir, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    _fake_hub_cache(tmp_path, "model", "tiny/bert", demo_dir / "models/tiny-bert")
    data = tmp_path / "texts"
    data.mkdir()
    shutil.copy(demo_dir / "data/texts.jsonl", data / "train.jsonl")
    _fake_hub_cache(tmp_path, "dataset", "tiny/texts", data)
    report = diagnose(PipelineSpec(model="tiny/bert", dataset="tiny/texts"))
    assert report.ok, report.to_json()
    with pytest.raises(InputError, match="not in the Hugging Face cache.*hf download tiny/other"):
        diagnose(PipelineSpec(model="tiny/other", dataset="tiny/texts"))


def test_a_copied_spec_names_the_folder_it_looked_for(tmp_path, monkeypatch):
    """A spec copied without its model folder: the error says where the relative path led."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    for model in ("./models/mine", "models/mine"):  # a path, or a path that reads as a Hub id
        spec = PipelineSpec.from_dict({"model": model, "dataset": "synthetic"}, base_dir=tmp_path)
        with pytest.raises(InputError, match=re.escape(f"folder at {tmp_path / 'models/mine'}")):
            diagnose(spec)


def test_remote_code_is_refused_unless_trusted(demo_dir, tmp_path):
    model = tmp_path / "custom"
    shutil.copytree(demo_dir / "models/tiny-bert", model)
    config = json.loads((model / "config.json").read_text())
    config.update(architectures=["MyCustomModel"], auto_map={"AutoModel": "modeling.MyCustomModel"})
    (model / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="trust_remote_code"):
        diagnose(PipelineSpec(model=str(model), dataset="synthetic"))


def test_foreign_tokenizer_is_refused(demo_dir, tmp_path, minilm_dir):
    model = tmp_path / "mixed"
    shutil.copytree(demo_dir / "models/tiny-bert", model)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir / name).exists():
            shutil.copy(minilm_dir / name, model / name)
    with pytest.raises(InputError, match="do not belong together"):
        diagnose(PipelineSpec(model=str(model), dataset="synthetic"))


# -- the real model -------------------------------------------------------------------------

def test_minilm_fp32_is_healthy_and_bf16_on_cpu_clean(minilm_dir, demo_dir):
    spec = PipelineSpec(model=str(minilm_dir), dataset=str(demo_dir / "data/texts.jsonl"))
    report = diagnose(spec)
    assert report.ok and report.findings == []
    assert report.output.name == "last_hidden_state" and report.output.shape[2] == 384
    bf16 = diagnose(spec.replace(model_dtype="bfloat16"))
    assert bf16.ok and bf16.findings == [] and bf16.output.dtype == "bfloat16"


def test_minilm_half_outputs_stay_close_to_fp32(minilm_dir, demo_dir):
    import torch

    spec = PipelineSpec(model=str(minilm_dir), dataset=str(demo_dir / "data/texts.jsonl"))
    reference = forward(prepare(spec)).last_hidden_state
    half = forward(prepare(spec.replace(model_dtype="bfloat16"))).last_hidden_state
    cosine = torch.nn.functional.cosine_similarity(reference.flatten(), half.float().flatten(), 0)
    assert cosine > 0.99
