"""Every finding code: one run that must trigger it, one that must not.

Real runs on tiny models wherever this CPU machine can produce the situation; the few that need
hardware it lacks (a second device, a full GPU) are checked on hand-built evidence here and for
real in tests/gpu.
"""

import pytest
import torch

from fp16studio.core.diagnostics.report import RunError
from fp16studio.core import PipelineSpec, apply_fix, diagnose
from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.diagnostics.report import ModelOutput
from fp16studio.core.diagnostics.rules import Evidence, run_rules
from fp16studio.core.run.trace import ModuleCall, TensorInfo


def codes(report):
    return {f.code for f in report.findings}


def finding(report, code):
    return next(f for f in report.findings if f.code == code)


def spec_for(demo_dir, model, dataset="data/images", **keys):
    return PipelineSpec.from_dict({"model": str(model), "dataset": dataset, **keys},
                                  base_dir=demo_dir)


# -- dtype-mismatch --------------------------------------------------------------------------

def test_fp16_model_fed_fp32_pixels_is_a_dtype_mismatch_at_the_first_conv(demo_dir):
    report = diagnose(demo_spec("fp16-model"))
    f = finding(report, "dtype-mismatch")
    assert f.severity == "error" and not report.ok
    assert f.location == "resnet.embedder.embedder.convolution"
    assert f.evidence["input dtype"] == "float32" and f.evidence["parameter dtype"] == "float16"
    # The first fix keeps half precision: cast the inputs, don't undo the model's dtype.
    assert f.fixes[0].edits == {"input_dtype": "float16", "input_cast": "floating"}


def test_fp32_model_fed_fp16_inputs_first_fix_loads_the_model_in_fp16(demo_dir):
    f = finding(diagnose(demo_spec("fp16-inputs")), "dtype-mismatch")
    assert f.fixes[0].edits["model_dtype"] == "float16"


def test_convnext_fp16_mismatch_and_fix_runs_clean(demo_dir, zoo):
    spec = spec_for(demo_dir, zoo["convnext"], model_dtype="bfloat16")
    report = diagnose(spec)
    assert "dtype-mismatch" in codes(report)
    fixed = diagnose(apply_fix(spec, report.fix("cast-inputs-bfloat16")))
    assert fixed.ok and fixed.output.dtype == "bfloat16"
    assert fixed.spec.applied_fixes[-1]["id"] == "cast-inputs-bfloat16"


def test_models_that_cast_their_inputs_are_no_dtype_mismatch(demo_dir, zoo):
    # ViT and CLIP cast pixel_values to the patch embedding's dtype themselves.
    assert "dtype-mismatch" not in codes(diagnose(demo_spec("vit-silent")))
    clip = diagnose(spec_for(demo_dir, zoo["clip-vision"], model_dtype="bfloat16"))
    assert clip.ok and "dtype-mismatch" not in codes(clip)


def test_healthy_pipeline_has_no_findings(demo_dir):
    report = diagnose(demo_spec("healthy"))
    assert report.ok and report.findings == [] and report.error is None
    assert report.output == ModelOutput(name="logits", dtype="float32", shape=[4, 3], finite=True)


def test_library_fp32_modules_are_not_findings(demo_dir, zoo):
    # T5 keeps `wo` in float32 under float16 (_keep_in_fp32_modules) and casts into it itself.
    report = diagnose(spec_for(demo_dir, zoo["t5-encoder"], "data/texts.jsonl",
                               model_dtype="float16"))
    params = {n.dtype for n in report.tree.walk() if n.kind == "parameter"}
    assert params == {"float16", "float32"}
    assert report.ok and codes(report) == {"half-on-cpu"}


# -- integer-cast ----------------------------------------------------------------------------

def test_blind_half_on_every_tensor_is_an_integer_cast_error(demo_dir):
    report = diagnose(demo_spec("blind-half"))
    f = finding(report, "integer-cast")
    assert f.severity == "error" and f.location == "input_ids"
    assert set(f.evidence["columns"]) == {"input_ids", "token_type_ids", "attention_mask"}
    assert f.fixes[0].edits == {"input_cast": "floating"}
    assert "dtype-mismatch" not in codes(report)  # the embedding's input is indices


def test_with_format_dtype_casts_labels_too(demo_dir):
    spec = spec_for(demo_dir, "models/tiny-bert", "data/texts.jsonl", format_dtype="float16",
                    with_labels=True)
    report = diagnose(spec)
    f = finding(report, "integer-cast")
    assert "labels" in f.evidence["columns"] and f.severity == "error"
    assert f.fixes[0].id == "format-without-dtype"
    assert diagnose(apply_fix(spec, f.fixes[0])).ok


def test_floating_only_cast_leaves_ids_alone(minilm_dir, demo_dir):
    spec = spec_for(demo_dir, minilm_dir, "data/texts.jsonl", input_dtype="float16")
    assert "integer-cast" not in codes(diagnose(spec))


# -- map-cast-lost ---------------------------------------------------------------------------

def test_cast_inside_map_is_lost(demo_dir):
    report = diagnose(demo_spec("map-cast"))
    f = finding(report, "map-cast-lost")
    assert f.location == "pixel_values"
    assert f.evidence["cast in map"] == "float16" and f.evidence["after DataLoader"] == "float32"
    assert f.fixes[0].edits == {"input_dtype": "float16", "input_cast": "floating",
                                "map_dtype": None}


def test_cast_in_the_users_preprocess_function_is_lost(demo_dir):
    report = diagnose(demo_spec("pil-preprocess"))
    f = finding(report, "map-cast-lost")
    assert "preprocess function" in f.message
    assert "dtype-mismatch" in codes(report)


def test_no_map_cast_no_finding(demo_dir):
    assert "map-cast-lost" not in codes(diagnose(demo_spec("fp16-model")))
    # A float32 "cast" in map changes nothing, so nothing is lost.
    spec = demo_spec("healthy").replace(map_dtype="float32")
    assert "map-cast-lost" not in codes(diagnose(spec))


# -- list-batch ------------------------------------------------------------------------------

def test_python_format_gives_lists(demo_dir):
    spec = demo_spec("healthy").replace(format="python")
    report = diagnose(spec)
    f = finding(report, "list-batch")
    assert f.severity == "error" and report.error.stage == "batch"
    assert "'list' object has no attribute 'to'" in report.error.message
    assert diagnose(apply_fix(spec, f.fixes[0])).ok


def test_torch_format_gives_no_lists(demo_dir):
    assert "list-batch" not in codes(diagnose(demo_spec("healthy")))


# -- half-unsupported / half-on-cpu ----------------------------------------------------------

def test_fft_has_no_half_kernel_on_cpu(demo_dir, zoo):
    spec = spec_for(demo_dir, zoo["fnet"], "data/texts.jsonl", model_dtype="float16")
    report = diagnose(spec)
    f = finding(report, "half-unsupported")
    assert f.severity == "error" and "Half" in f.evidence["error"]
    fixed = diagnose(apply_fix(spec, f.fixes[0]))  # autocast keeps fp16 matmuls, fft in fp32
    assert fixed.ok and "half-unsupported" not in codes(fixed)


def test_fnet_in_float32_is_supported(demo_dir, zoo):
    report = diagnose(spec_for(demo_dir, zoo["fnet"], "data/texts.jsonl"))
    assert report.ok and "half-unsupported" not in codes(report)


def test_fp16_on_cpu_warns_and_bf16_does_not(demo_dir):
    spec = demo_spec("fp16-model").replace(input_dtype="float16")
    report = diagnose(spec)
    assert report.ok and finding(report, "half-on-cpu").severity == "warning"
    bf16 = diagnose(apply_fix(spec, finding(report, "half-on-cpu").fixes[0]))
    assert bf16.ok and "half-on-cpu" not in codes(bf16)
    assert bf16.output.dtype == "bfloat16"


# -- overflow --------------------------------------------------------------------------------

def test_fp16_overflow_names_the_first_module(demo_dir):
    report = diagnose(demo_spec("overflow"))
    f = finding(report, "overflow")
    assert f.severity == "error" and not report.ok and report.error is None
    assert f.location == "bert.encoder.layer.0.intermediate.dense"
    assert report.output.finite is False
    # Float32 islands first (the rest stays float16), then the model-wide answers.
    assert f.fixes[0].id == "float32-islands"
    assert f.fixes[1].edits["model_dtype"] == "bfloat16"
    node = report.tree.find(f.location)
    assert node is not None and node.status == "error"


def test_bfloat16_range_does_not_overflow(demo_dir):
    report = diagnose(demo_spec("overflow").replace(model_dtype="bfloat16"))
    assert report.ok and "overflow" not in codes(report) and report.output.finite


# -- silent-upcast / autocast-inactive -------------------------------------------------------

def test_vit_runs_fp16_inputs_silently_in_fp32(demo_dir):
    report = diagnose(demo_spec("vit-silent"))
    f = finding(report, "silent-upcast")
    assert report.ok and f.severity == "warning" and f.location == "vit"
    fixed = diagnose(apply_fix(demo_spec("vit-silent"), f.fixes[0]))
    assert "silent-upcast" not in codes(fixed) and fixed.output.dtype == "float16"


def test_autocast_bf16_on_cpu_is_active(demo_dir):
    report = diagnose(demo_spec("healthy").replace(autocast="bfloat16"))
    assert report.ok and "autocast-inactive" not in codes(report)
    assert "silent-upcast" not in codes(report)


def _evidence(**overrides):
    base = dict(spec=PipelineSpec(model="m", dataset="d"), device_type="cpu",
                param_dtypes={"float32": 10}, module_param_dtypes={"fc": "float32"})
    base.update(overrides)
    return Evidence(**base)


def _linear(dtype_in, dtype_out, device="cpu", completed=True, params_device="cpu"):
    call = ModuleCall(index=0, name="fc", cls="Linear", params={"float32": 10},
                      param_devices=(params_device,), completed=completed, finished=0)
    call.inputs = [TensorInfo("input", dtype_in, device, (2, 4), absmax=1.0)]
    if completed:
        call.outputs = [TensorInfo("output", dtype_out, device, (2, 4), absmax=1.0)]
    return call


def test_autocast_that_changed_nothing_is_inactive():
    # What a forward pass looks like when autocast was entered in another thread.
    ev = _evidence(spec=PipelineSpec(model="m", dataset="d", autocast="float16"),
                   calls=[_linear("float32", "float32")])
    f = next(f for f in run_rules(ev) if f.code == "autocast-inactive")
    assert f.severity == "warning" and f.evidence["compute dtypes"] == {"float32": 1}
    active = _evidence(spec=PipelineSpec(model="m", dataset="d", autocast="float16"),
                       calls=[_linear("float32", "float16")])
    assert "autocast-inactive" not in {f.code for f in run_rules(active)}


def test_an_autocast_naming_another_device_does_nothing_even_when_the_forward_fails(demo_dir):
    """autocast('cuda') around a model on the CPU: no false half-on-cpu for a float32 model, and
    the autocast is still named as doing nothing when the forward fails for another reason."""
    spec = demo_spec("healthy").replace(device="cpu", autocast="float16", autocast_device="cuda")
    assert codes(diagnose(spec)) == {"autocast-inactive"}
    failing = diagnose(spec.replace(input_dtype="float16"))
    assert not failing.ok and "autocast-inactive" in codes(failing) and "half-on-cpu" not in codes(failing)


# -- device-mismatch / device-unavailable / out-of-memory / mixed-precision-params -----------

def test_inputs_left_on_another_device_are_a_device_mismatch():
    message = ("Expected all tensors to be on the same device, but found at least two devices, "
               "cuda:0 and cpu!")
    ev = _evidence(calls=[_linear("float32", None, device="cpu", completed=False,
                                  params_device="cuda:0")],
                   error=RunError(type="RuntimeError", message=message, stage="forward",
                          module="fc"))
    f = next(f for f in run_rules(ev) if f.code == "device-mismatch")
    assert f.severity == "error" and f.location == "fc"
    assert f.evidence == {"inputs on": ["cpu"], "parameters on": ["cuda:0"]}
    assert f.fixes[0].edits == {"input_device": "model"}


def test_same_device_is_no_device_mismatch(demo_dir):
    assert "device-mismatch" not in codes(diagnose(demo_spec("healthy").replace(
        device="cpu", input_device="cpu")))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_missing_cuda_is_device_unavailable(demo_dir):
    report = diagnose(demo_spec("healthy").replace(device="cuda"))
    f = finding(report, "device-unavailable")
    assert f.severity == "error" and not report.ok and report.tree is None
    assert f.evidence["available"] == ["cpu"]
    assert diagnose(apply_fix(report.spec, f.fixes[0])).ok


def test_present_device_is_available(demo_dir):
    assert "device-unavailable" not in codes(diagnose(demo_spec("healthy").replace(device="cpu")))


def test_out_of_memory_suggests_half_weights_then_a_smaller_batch():
    exc = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    ev = _evidence(device_type="cuda", exception=exc,
                   error=RunError(type="OutOfMemoryError", message=str(exc), stage="forward",
                          module="fc"))
    f = next(f for f in run_rules(ev) if f.code == "out-of-memory")
    assert f.severity == "error" and f.location == "fc"
    assert [fix.id for fix in f.fixes] == ["model-float16", "halve-batch"]
    other = _evidence(error=RunError(type="RuntimeError", message="boom", stage="forward",
                             module="fc"), exception=RuntimeError("boom"))
    assert "out-of-memory" not in {f.code for f in run_rules(other)}


def test_unexplained_mixed_parameter_dtypes():
    ev = _evidence(param_dtypes={"float16": 100, "float32": 10},
                   module_param_dtypes={"encoder.0": "float16", "encoder.1": "float32"})
    f = next(f for f in run_rules(ev) if f.code == "mixed-precision-params")
    assert f.location == "encoder.1" and f.fixes[0].edits == {"model_dtype": "float16"}


def test_keep_fp32_explains_mixed_parameter_dtypes(demo_dir):
    spec = demo_spec("healthy").replace(model_dtype="bfloat16", input_dtype="bfloat16",
                                        keep_fp32=["classifier.*"])
    report = diagnose(spec)
    params = {n.dtype for n in report.tree.walk() if n.kind == "parameter"}
    assert params == {"bfloat16", "float32"}
    assert "mixed-precision-params" not in codes(report)


def test_out_of_memory_while_loading_is_a_finding_not_a_crash(demo_dir, monkeypatch):
    def too_big(spec, progress=None):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 28.00 GiB")

    monkeypatch.setattr("fp16studio.core.diagnostics.diagnosis.prepare_model", too_big)
    report = diagnose(demo_spec("healthy"))
    assert [f.code for f in report.findings] == ["out-of-memory"]
    assert report.error.stage == "model" and not report.ok


@pytest.mark.parametrize("key", ["keep_fp32", "run_in_float32"])
def test_a_module_pattern_that_matches_nothing_is_bad_input_naming_the_closest(demo_dir, key):
    from fp16studio.core.common.errors import InputError

    spec = demo_spec("healthy").replace(model_dtype="float16", **{key: ["resnet.poolr"]})
    with pytest.raises(InputError, match=rf"^{key}: 'resnet.poolr' matches no module of "
                                         r".*did you mean 'resnet.pooler'\?"):
        diagnose(spec)


def test_a_shared_modules_second_path_is_a_module_pattern_too():
    from fp16studio.core.hf.loading import check_module_patterns, keep_in_float32

    shared = torch.nn.Linear(2, 2)
    model = torch.nn.ModuleDict({"a": shared, "b": shared})   # tied: one module, two paths
    spec = PipelineSpec(model="m", dataset="synthetic", keep_fp32=["b"])
    check_module_patterns(model, spec)
    assert keep_in_float32(model, spec.keep_fp32) == ["b"]


def test_multi_label_classifier_fed_integer_multi_hot_labels_is_label_dtype(demo_dir, tmp_path):
    """BCE-with-logits takes float targets: int64 multi-hot labels fail in the loss
    ("result type Float can't be cast to the desired output type Long"); the fix casts them."""
    import json
    import shutil

    shutil.copytree(demo_dir / "models/tiny-bert", tmp_path / "model")
    config = json.loads((tmp_path / "model/config.json").read_text())
    config["problem_type"] = "multi_label_classification"
    (tmp_path / "model/config.json").write_text(json.dumps(config))
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"text": f"a sentence {i}", "label": [i % 2, 1, 0]}) + "\n" for i in range(8)))
    spec = PipelineSpec(model="model", dataset="data.jsonl", with_labels=True, device="cpu",
                        base_dir=str(tmp_path))
    report = diagnose(spec)
    assert not report.ok and [f.code for f in report.findings] == ["label-dtype"]
    fix = report.findings[0].fixes[0]
    assert fix.edits == {"label_dtype": "float32"}
    assert diagnose(apply_fix(spec, fix)).ok
