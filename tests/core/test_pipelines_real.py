"""Pipelines as users write them (issue 10): whole-model casts, label dtypes, autocast devices,
columns a preprocess makes, and the diagnoses that used to name the wrong thing."""

import pytest
import torch

from fp16studio.core.diagnostics.report import RunError
from fp16studio.core import InputError, PipelineSpec, apply_fix, diagnose
from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.diagnostics.rules import Evidence, run_rules
from fp16studio.core.run.pipeline import prepare
from fp16studio.core.run.trace import ModuleCall, TensorInfo


def codes(report):
    return {f.code for f in report.findings}


def finding(report, code):
    return next(f for f in report.findings if f.code == code)


def spec_for(model, dataset, **keys):
    return PipelineSpec.from_dict({"model": str(model), "dataset": str(dataset), **keys})


@pytest.fixture(scope="module")
def overflowing_t5(zoo, tmp_path_factory):
    """The zoo's T5 encoder with `wo` scaled past float16's range: fine in float32."""
    from transformers import AutoTokenizer, T5EncoderModel

    folder = tmp_path_factory.mktemp("t5") / "overflow-t5"
    model = T5EncoderModel.from_pretrained(zoo["t5-encoder"])
    with torch.no_grad():
        for block in model.encoder.block:
            block.layer[1].DenseReluDense.wo.weight.mul_(3e4)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(zoo["t5-encoder"]).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def csv_rows(tmp_path_factory):
    """Texts with class ids written as floats (0.0, 1.0, 2.0) and as names, in a CSV."""
    import datasets

    folder = tmp_path_factory.mktemp("csv")
    texts = ["half precision", "float16 weights", "a cast inside map", "token ids stay integer"]
    datasets.Dataset.from_dict({"text": texts, "label": [0.0, 1.0, 2.0, 0.0],
                                "animal": ["cat", "dog", "bird", "cat"]}).to_csv(
        str(folder / "rows.csv"))
    return folder / "rows.csv"


# -- model_cast ------------------------------------------------------------------------------

def test_model_cast_casts_the_librarys_float32_modules_too(zoo, demo_dir):
    texts = demo_dir / "data/texts.jsonl"
    loaded = diagnose(spec_for(zoo["t5-encoder"], texts, model_dtype="float16"))
    cast = diagnose(spec_for(zoo["t5-encoder"], texts, model_cast="float16"))

    def dtypes_of(report):
        return {n.dtype for n in report.tree.walk() if n.kind == "parameter"}

    assert dtypes_of(loaded) == {"float16", "float32"}   # T5 keeps `wo` in float32 at load
    assert dtypes_of(cast) == {"float16"}                # model.half() casts it too


def test_model_cast_overflow_is_fixed_by_loading_in_half_instead(overflowing_t5, demo_dir):
    spec = spec_for(overflowing_t5, demo_dir / "data/texts.jsonl", model_cast="float16")
    report = diagnose(spec)
    f = finding(report, "overflow")
    assert f.location.endswith("DenseReluDense.wo")
    assert f.fixes[0].edits == {"model_cast": None, "model_dtype": "float16"}
    fixed = diagnose(apply_fix(spec, f.fixes[0]))
    assert fixed.ok and "overflow" not in codes(fixed)


# -- label_dtype -----------------------------------------------------------------------------

def test_float_class_ids_from_a_csv_are_a_label_dtype_error(demo_dir, csv_rows):
    spec = spec_for(demo_dir / "models/tiny-bert", csv_rows, with_labels=True)
    report = diagnose(spec)
    f = finding(report, "label-dtype")
    assert f.severity == "error" and f.location == "labels"
    assert f.evidence["stored"] == "float64" and "CSV" in f.message
    assert f.fixes[0].edits == {"label_dtype": "int64"}
    fixed = diagnose(apply_fix(spec, f.fixes[0]))
    assert fixed.ok


def test_labels_cast_to_half_are_fixed_by_casting_the_labels_back(demo_dir):
    spec = spec_for(demo_dir / "models/tiny-bert", demo_dir / "data/texts.jsonl",
                    with_labels=True, model_dtype="bfloat16", input_dtype="bfloat16",
                    input_cast="all")
    spec = spec.replace(input_cast="floating", label_dtype=None)
    assert diagnose(spec).ok
    # Labels cast with the rest (with_format's dtype=): the loss refuses half class ids.
    report = diagnose(spec.replace(format_dtype="bfloat16"))
    f = finding(report, "label-dtype")
    assert f.fixes[0].edits == {"label_dtype": "int64"}
    fixed = apply_fix(report.spec, f.fixes[0])
    assert "label-dtype" not in codes(diagnose(fixed))


def test_string_labels_say_they_are_strings_and_the_fix_changes_something(demo_dir, csv_rows):
    spec = spec_for(demo_dir / "models/tiny-bert", csv_rows, with_labels=True,
                    columns={"label": "animal"})
    report = diagnose(spec)
    f = finding(report, "label-dtype")
    assert "strings" in f.message and "list-batch" not in codes(report)
    fixed = apply_fix(spec, f.fixes[0])
    assert fixed != spec and diagnose(fixed).ok


# -- autocast_device -------------------------------------------------------------------------

def test_autocast_naming_cuda_on_a_cpu_model_is_inactive(demo_dir):
    spec = demo_spec("healthy").replace(device="cpu", autocast="bfloat16",
                                        autocast_device="cuda")
    report = diagnose(spec)
    f = finding(report, "autocast-inactive")
    assert "'cuda'" in f.message and f.evidence["model device"] == "cpu"
    assert f.fixes[0].edits == {"autocast_device": "cpu"}
    fixed = diagnose(apply_fix(spec, f.fixes[0]))
    assert "autocast-inactive" not in codes(fixed) and fixed.output.dtype == "bfloat16"


def test_autocast_naming_the_models_device_is_active(demo_dir):
    spec = demo_spec("healthy").replace(device="cpu", autocast="bfloat16", autocast_device="cpu")
    assert "autocast-inactive" not in codes(diagnose(spec))


# -- columns a preprocess makes --------------------------------------------------------------

def test_a_label_column_made_by_the_preprocess_is_found_after_it_ran(demo_dir, tmp_path):
    (tmp_path / "prep.py").write_text(
        "def rename(example):\n"
        "    return {'target': example['label']}\n")
    spec = spec_for(demo_dir / "models/tiny-bert", demo_dir / "data/texts.jsonl",
                    preprocess=str(tmp_path / "prep.py") + ":rename", with_labels=True,
                    columns={"label": "target"})
    prepared = prepare(spec)
    assert prepared.batch["labels"].tolist() == [0, 1, 2, 0]


# -- diagnoses that named the wrong thing ----------------------------------------------------

def test_an_input_device_this_machine_lacks_is_device_unavailable(demo_dir):
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    spec = demo_spec("healthy").replace(device="cpu", input_device="cuda:0")
    report = diagnose(spec)
    f = finding(report, "device-unavailable")
    assert f.location == "input_device" and f.fixes[0].edits == {"input_device": "model"}
    assert diagnose(apply_fix(spec, f.fixes[0])).ok


def test_a_float64_preprocess_is_no_map_cast_lost_and_no_fix_is_rejected(demo_dir, tmp_path):
    (tmp_path / "prep.py").write_text(
        "import numpy as np\nimport torch\n\n\n"
        "def to_pixels(example):\n"
        "    array = np.asarray(example['image'].convert('RGB').resize((32, 32)), np.float64)\n"
        "    example['pixel_values'] = torch.from_numpy(array / 255.0).permute(2, 0, 1)\n"
        "    return example\n")
    spec = demo_spec("fp16-model").replace(device="cpu",
                                           preprocess=str(tmp_path / "prep.py") + ":to_pixels")
    report = diagnose(spec)
    assert "map-cast-lost" not in codes(report) and report.findings
    for f in report.findings:
        for fix in f.fixes:
            apply_fix(spec, fix)  # raises InputError if a fix wrote a spec the tool rejects


def test_integer_cast_is_located_at_the_tensor_the_failing_module_received():
    from fp16studio.core.data.columns import ColumnFacts

    shape = (4, 7)
    facts = {key: ColumnFacts(key, stored="int64", final="float16", shape=shape)
             for key in ("attention_mask", "input_ids")}   # the mask comes first in the batch
    embed = ModuleCall(0, "encoder.embed_tokens", "Embedding", {"float16": 10}, ("cpu",),
                       inputs=[TensorInfo("input", "float16", "cpu", shape)])
    ev = Evidence(spec=PipelineSpec(model="m", dataset="d", input_dtype="float16",
                                    input_cast="all"),
                  device_type="cpu", param_dtypes={"float16": 10},
                  module_param_dtypes={"encoder.embed_tokens": "float16"}, facts=facts,
                  calls=[embed],
                  error=RunError(type="RuntimeError", stage="forward",
                         module="encoder.embed_tokens",
                         message="Expected tensor for argument #1 'indices' to have one of the "
                                    "following scalar types: Long, Int; but got "
                                    "torch.HalfTensor instead (while checking arguments for "
                                    "embedding)"))
    f = next(f for f in run_rules(ev) if f.code == "integer-cast")
    assert f.location == "input_ids"


def test_keep_fp32_norms_name_the_float32_module_and_fix_it(zoo, demo_dir):
    spec = spec_for(zoo["llama"], demo_dir / "data/texts.jsonl", model_dtype="bfloat16",
                    keep_fp32=["*norm*"])
    report = diagnose(spec)
    f = finding(report, "dtype-mismatch")
    assert f.location == "model.layers.0.input_layernorm"
    assert f.evidence["produced by"] == f.location and "keep_fp32" in f.message
    # The first fix addresses the module (not a batch cast that changes nothing) ...
    assert f.fixes[0].edits == {"keep_fp32": [], "run_in_float32": ["*norm*"]}
    assert "input_dtype" not in f.fixes[0].edits
    # ... and the fallback that needs no island runs clean.
    assert diagnose(apply_fix(spec, f.fixes[1])).ok


def test_a_text_model_given_an_image_dataset_says_so(demo_dir):
    with pytest.raises(InputError, match="takes text .* has image"):
        prepare(spec_for(demo_dir / "models/tiny-bert", demo_dir / "data/images"))


def test_texts_longer_than_the_position_table_say_so_and_how_to_truncate(demo_dir, tmp_path):
    import json

    long = " ".join(["half precision halves the memory of every weight"] * 30)
    (tmp_path / "long.jsonl").write_text(json.dumps({"text": long, "label": 0}) + "\n")
    spec = spec_for(demo_dir / "models/tiny-bert", tmp_path / "long.jsonl")
    with pytest.raises(InputError, match="takes at most 64 positions.*model_max_length"):
        diagnose(spec)


# -- multimodal processors -------------------------------------------------------------------

@pytest.fixture(scope="module")
def captioned_images(tmp_path_factory):
    import datasets
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(4)]
    ds = datasets.Dataset.from_dict({"image": images, "caption": ["a cat", "a dog", "a bird",
                                                                  "two cats"]})
    folder = tmp_path_factory.mktemp("captions") / "saved"
    ds.cast_column("image", datasets.Image()).save_to_disk(str(folder))
    return folder


def test_a_text_and_image_model_gets_both_from_its_processor(zoo, captioned_images, demo_dir):
    spec = spec_for(zoo["clip"], captioned_images, columns={"text": "caption"})
    prepared = prepare(spec)
    assert {"input_ids", "attention_mask", "pixel_values"} <= set(prepared.batch)
    report = diagnose(spec)
    assert report.ok and report.output.name == "logits_per_image"
    # Missing one of the two media is said plainly.
    with pytest.raises(InputError, match="takes text and image together"):
        prepare(spec_for(zoo["clip"], demo_dir / "data/images"))


# -- model_dtype: auto -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def bf16_checkpoint(demo_dir, tmp_path_factory):
    """The demo ResNet saved in bfloat16, as many checkpoints on the Hub are."""
    from transformers import AutoImageProcessor, ResNetForImageClassification

    folder = tmp_path_factory.mktemp("bf16") / "resnet-bf16"
    source = demo_dir / "models/tiny-resnet"
    ResNetForImageClassification.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(folder)
    AutoImageProcessor.from_pretrained(source).save_pretrained(folder)
    return folder


def test_auto_dtype_is_read_from_the_config_else_the_weights(bf16_checkpoint, tmp_path):
    import json
    import shutil

    from fp16studio.core.hf.loading import auto_dtype, auto_dtype_note

    assert auto_dtype(bf16_checkpoint) == ("bfloat16", "config.json dtype")
    bare = tmp_path / "bare"
    shutil.copytree(bf16_checkpoint, bare)
    config = json.loads((bare / "config.json").read_text())
    config.pop("dtype", None)
    (bare / "config.json").write_text(json.dumps(config))
    assert auto_dtype(bare) == ("bfloat16", "the safetensors weights")
    note = auto_dtype_note(PipelineSpec(model=str(bare), dataset="synthetic", model_dtype="auto"))
    assert note.endswith("bfloat16, from the safetensors weights")
    missing = PipelineSpec(model=str(tmp_path / "nowhere"), dataset="synthetic")
    assert auto_dtype_note(missing).endswith("resolved when the model is loaded")


def test_auto_loads_a_bf16_checkpoint_that_float32_inputs_then_clash_with(bf16_checkpoint,
                                                                          demo_dir):
    spec = spec_for(bf16_checkpoint, demo_dir / "data/images", model_dtype="auto")
    report = diagnose(spec)
    f = finding(report, "dtype-mismatch")
    assert f.evidence["parameter dtype"] == "bfloat16"
    assert "transformers 5 loads the checkpoint's own dtype, bfloat16" in f.message
    assert f.fixes[0].id == "cast-inputs-bfloat16"
    fixed = diagnose(apply_fix(spec, f.fixes[0]))
    assert fixed.ok and fixed.output.dtype == "bfloat16"


def test_a_causal_lm_gets_the_labels_its_preprocess_made_from_input_ids(zoo, demo_dir, tmp_path):
    (tmp_path / "prep.py").write_text(
        "def tokenize(example):\n"
        "    ids = [2] + [5 + (ord(c) % 40) for c in example['text'][:12]] + [3]\n"
        "    return {'input_ids': ids, 'labels': list(ids)}\n")
    spec = spec_for(zoo["llama"], demo_dir / "data/texts.jsonl", with_labels=True,
                    preprocess=str(tmp_path / "prep.py") + ":tokenize")
    prepared = prepare(spec)
    assert torch.equal(prepared.batch["labels"], prepared.batch["input_ids"])
    report = diagnose(spec)
    assert report.ok and report.output.name == "logits"
