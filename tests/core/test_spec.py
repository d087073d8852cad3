"""The spec: keys, aliases, validation, files, and saving without losing anything."""

import json

import pytest

from fp16studio.core import InputError, PipelineSpec
from fp16studio.core.spec.documents import load_spec, save_spec
from fp16studio.core.spec.value import KEYS


def test_defaults_follow_the_contract():
    spec = PipelineSpec(model="m", dataset="d")
    assert spec.to_dict() == {
        "model": "m", "dataset": "d", "revision": None, "task": "auto",
        "trust_remote_code": False, "dataset_config": None, "split": "train", "columns": {},
        "samples": 8, "batch_size": 4, "preprocess": None, "map_dtype": None, "format": "torch",
        "format_dtype": None, "device": "auto", "device_map": None, "model_dtype": "float32",
        "keep_fp32": [], "input_dtype": None, "input_cast": "floating", "input_device": "model",
        "autocast": None, "with_labels": False, "model_cast": None, "run_in_float32": [],
        "label_dtype": None, "autocast_device": None, "sampling_rate": None, "train": None,
        "applied_fixes": []}
    assert set(KEYS) == set(spec.to_dict())


@pytest.mark.parametrize("alias,name", [("fp16", "float16"), ("half", "float16"),
                                        ("bf16", "bfloat16"), ("fp32", "float32"),
                                        ("torch.float16", "float16")])
def test_dtype_aliases_are_normalised(alias, name):
    spec = PipelineSpec(model="m", dataset="d", model_dtype=alias, input_dtype=alias)
    assert spec.model_dtype == name and spec.input_dtype == name


@pytest.mark.parametrize("keys,words", [
    ({"model_dtype": "float8"}, "model_dtype"),
    ({"batch_size": 0}, "batch_size"),
    ({"samples": "8"}, "samples"),
    ({"dataset": "synthetic", "samples": 5000}, "samples: at most 4096 with dataset 'synthetic'"),
    ({"format": "numpy"}, "format"),
    ({"device": "tpu"}, "device"),
    ({"input_cast": "some"}, "input_cast"),
    ({"autocast": "float32"}, "autocast"),
    ({"columns": {"video": "x"}}, "columns"),
    ({"model_cast": "int8"}, "model_cast"),
    ({"run_in_float32": "encoder.*"}, "run_in_float32"),
    ({"label_dtype": "float16"}, "label_dtype"),
    ({"autocast_device": "tpu"}, "autocast_device"),
    ({"sampling_rate": 0}, "sampling_rate"),
    ({"sampling_rate": 16000.5}, "sampling_rate"),
    ({"preprocess": "file.py"}, "preprocess"),
    ({"trust_remote_code": "yes"}, "trust_remote_code"),
])
def test_bad_values_name_the_key(keys, words):
    with pytest.raises(InputError, match=words):
        PipelineSpec.from_dict({"model": "m", "dataset": "d", **keys})


def test_unknown_and_missing_keys():
    with pytest.raises(InputError, match="unknown key 'colour'"):
        PipelineSpec.from_dict({"model": "m", "dataset": "d", "colour": "blue"})
    with pytest.raises(InputError, match="'dataset' is required"):
        PipelineSpec.from_dict({"model": "m"})


def test_toml_and_json_files(tmp_path):
    (tmp_path / "a.toml").write_text('model = "m"\ndataset = "d"\nmodel_dtype = "half"\n')
    spec = load_spec(tmp_path / "a.toml")
    assert spec.model_dtype == "float16" and spec.base_dir == str(tmp_path)
    save_spec(spec, tmp_path / "b.json")
    assert load_spec(tmp_path / "b.json") == spec


def test_a_saved_session_opens_as_its_spec(tmp_path):
    doc = {"fp16studio_session": 1, "spec": {"model": "m", "dataset": "d"}, "diagnosis": None}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    assert load_spec(tmp_path / "s.json").model == "m"


def test_save_elsewhere_keeps_local_paths_reachable(tmp_path):
    (tmp_path / "here" / "model").mkdir(parents=True)
    (tmp_path / "here" / "pre.py").write_text("def f(x):\n    return x\n")
    spec = PipelineSpec(model="model", dataset="org/hub-data", preprocess="pre.py:f",
                        base_dir=str(tmp_path / "here"))
    (tmp_path / "there").mkdir()
    save_spec(spec, tmp_path / "there" / "s.json")
    moved = load_spec(tmp_path / "there" / "s.json")
    assert moved.local_path(moved.model) == (tmp_path / "here" / "model").resolve()
    assert moved.preprocess == f"{(tmp_path / 'here' / 'pre.py').resolve()}:f"
    assert moved.dataset == "org/hub-data"  # a Hub id is not a path


def test_save_is_atomic_and_keeps_the_old_file_on_failure(tmp_path, monkeypatch):
    """A write cut off half-way (a full disk, an interrupt) leaves the old spec whole and no
    stray temporary file."""
    import pathlib

    path = tmp_path / "s.json"
    save_spec(PipelineSpec(model="old", dataset="d"), path)
    real_write = pathlib.Path.write_text

    def half_then_fail(self, text, *args, **kwargs):
        real_write(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pathlib.Path, "write_text", half_then_fail)
    with pytest.raises(InputError, match="No space left"):
        save_spec(PipelineSpec(model="new", dataset="d"), path)
    monkeypatch.undo()
    assert json.loads(path.read_text())["model"] == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_writing_never_takes_a_users_file_for_its_temporary(tmp_path):
    """The temporary file has a fresh name: a user's own `.s.json.tmp` survives a save."""
    mine = tmp_path / ".s.json.tmp"
    mine.write_text("the user's notes")
    save_spec(PipelineSpec(model="m", dataset="d"), tmp_path / "s.json")
    assert mine.read_text() == "the user's notes"


def test_new_keys_are_normalised():
    spec = PipelineSpec(model="m", dataset="d", model_cast="half", label_dtype="long",
                        autocast_device=" CUDA ", run_in_float32=["*.wo"], sampling_rate=16000,
                        columns={"audio": "clip"})
    assert (spec.model_cast, spec.label_dtype, spec.autocast_device) == ("float16", "int64", "cuda")
    assert spec.run_in_float32 == ("*.wo",) and spec.columns == {"audio": "clip"}


def test_a_spec_is_frozen_all_the_way_down_and_hashable():
    import pickle

    spec = PipelineSpec(model="m", dataset="d", columns={"text": "t"},
                        applied_fixes=[{"id": "a", "title": "A", "edits": {"keep_fp32": ["x"]}}])
    with pytest.raises(TypeError):
        spec.columns["label"] = "y"
    with pytest.raises(TypeError):
        spec.applied_fixes[0]["edits"]["keep_fp32"] = []
    assert hash(spec) == hash(PipelineSpec.from_dict(spec.to_dict()))
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert json.loads(json.dumps(spec.to_dict())) == spec.to_dict()


def test_an_unknown_key_suggests_the_near_one():
    with pytest.raises(InputError, match="did you mean 'model_dtype'"):
        PipelineSpec.from_dict({"model": "m", "dataset": "d", "modle_dtype": "fp16"})


def test_a_home_of_someone_unknown_is_not_a_local_path(tmp_path):
    spec = PipelineSpec(model="~nosuchuser-fp16studio/x", dataset="synthetic", base_dir=str(tmp_path))
    assert spec.local_path(spec.model) is None   # pathlib would raise: it was exit 3
