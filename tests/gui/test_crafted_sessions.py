"""Crafted or damaged session files open in the window (issue 22): the spec is shown, what of
the saved results cannot be read is dropped, and one line says what was dropped; never a
traceback and a blank window. A session whose own spec cannot be read is refused in one line."""

import copy
import json

import pytest

from fp16studio.core import PipelineSpec
from fp16studio.core.precision.bench import BenchResult
from fp16studio.gui import MainWindow
from window_steps import listed

OPEN_TIMEOUT_MS = 60_000
SPEC = {"model": "m", "dataset": "synthetic", "model_dtype": "float16"}
DIAGNOSIS = {
    "ok": False, "spec": SPEC, "device": "cpu",
    "findings": [{"code": "half-on-cpu", "severity": "warning", "location": "model",
                  "message": "float16 compute on a CPU.", "evidence": {"device": "cpu"},
                  "fixes": [{"id": "model-float32", "title": "Keep the model in float32",
                             "edits": {"model_dtype": "float32"}}]}],
    "error": None,
    "inventory": {"parameters": 10, "tensors": 2, "bytes": 40, "dtypes": {"float16": 2}},
    "output": {"name": "logits", "dtype": "float16", "shape": [4, 3], "finite": True},
    "timings": {"forward": 0.1}, "environment": {"torch": "2.13.0"},
}
BENCH = {"device": "cpu", "variants": [
    {"name": "float32", "ok": True, "samples_per_s": 60.0,
     "latency_ms": {"p50": 60.0, "p90": 61.0, "min": 59.0}, "peak_memory_bytes": 1000,
     "weights_bytes": 800, "max_abs_diff_vs_float32": 0.0, "top1_agreement": 1.0},
    {"name": "float16", "ok": False, "error": "no kernel", "samples_per_s": None}]}
DRIFT = {"reference": "float32", "variant": "float16", "ok": True, "first_divergent": None,
         "output": {"max_abs_diff": 0.0, "cosine": 1.0, "top1_agreement": 1.0}, "modules": [],
         "findings": [], "error": None, "timings": {}}


def diagnosis(**changes):
    return {**copy.deepcopy(DIAGNOSIS), **changes}


def finding(**changes):
    return diagnosis(findings=[{**DIAGNOSIS["findings"][0], **changes}])


def bench(**changes):
    return {**copy.deepcopy(BENCH), **changes}


def variant(**changes):
    return bench(variants=[{**BENCH["variants"][0], **changes}])


# name: (the session's diagnosis, its bench, the words the one line has)
CRAFTED = {
    "a drift document as the diagnosis": (DRIFT, BENCH, ["findings", "spec"]),
    "a finding without code": (finding(code=None), BENCH, ["findings", "code"]),
    "a finding of a code this version does not know": (finding(code="made-up"), BENCH, ["findings", "code"]),
    "a severity that is none": (finding(severity="fatal"), BENCH, ["findings", "severity"]),
    "findings as a string": (diagnosis(findings="none"), BENCH, ["findings"]),
    "a location that is null": (finding(location=None), BENCH, ["findings", "location"]),
    "a fix without an id": (finding(fixes=[{"title": "t"}]), BENCH, ["findings", "id"]),
    "a fix whose edits are a number": (finding(fixes=[{"id": "x", "title": "t", "edits": 5}]),
                                       BENCH, ["findings", "edits"]),
    "evidence as a list": (finding(evidence=[1, 2]), BENCH, ["findings", "evidence"]),
    "an unknown spec key in the diagnosis": (diagnosis(spec={**SPEC, "colour": "red"}), BENCH,
                                             ["findings", "colour"]),
    "the diagnosis as a list": ([1], BENCH, ["findings"]),
    "the error as a string": (diagnosis(error="boom"), BENCH, ["findings", "error"]),
    "the inventory's counts as strings": (diagnosis(inventory={"parameters": "many"}), BENCH,
                                          ["findings", "parameters"]),
    "timings as a list": (diagnosis(timings=[1, 2]), BENCH, ["findings", "timings"]),
    "bench variants as a string": (DIAGNOSIS, bench(variants="float16"), ["benchmark", "variants"]),
    "a bench variant without a name": (DIAGNOSIS, variant(name=None), ["benchmark", "name"]),
    "samples/s as a word": (DIAGNOSIS, variant(samples_per_s="fast"), ["benchmark", "samples_per_s"]),
    "a memory figure no chart can draw": (DIAGNOSIS, variant(peak_memory_bytes=10 ** 400),
                                          ["benchmark", "peak_memory_bytes"]),
    "latency as a number": (DIAGNOSIS, variant(latency_ms=5), ["benchmark", "latency_ms"]),
    "the bench as a list": (DIAGNOSIS, [1], ["benchmark"]),
    "both unreadable": ("x", "y", ["findings", "benchmark"]),
}


def session_file(tmp_path, spec, diagnosis_doc, bench_doc):
    path = tmp_path / "crafted.fp16studio"
    path.write_text(json.dumps({"fp16studio_session": 1, "version": "0", "spec": spec,
                                "diagnosis": diagnosis_doc, "bench": bench_doc}))
    return path


def opened(qtbot, path):
    """MainWindow(spec=path): the window's open_path, as File → Open takes it."""
    window = MainWindow(str(path))
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.controller.state.path is not None, timeout=OPEN_TIMEOUT_MS)
    return window


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_a_crafted_session_opens_its_spec_and_says_what_it_dropped(qtbot, tmp_path, name):
    diagnosis_doc, bench_doc, words = CRAFTED[name]
    window = opened(qtbot, session_file(tmp_path, SPEC, diagnosis_doc, bench_doc))
    assert window.spec == PipelineSpec.from_dict(SPEC, base_dir=tmp_path)
    assert window.form.spec == window.spec
    status = window.controller.status
    assert "\n" not in status and "crafted.fp16studio" in status, status
    for word in words:
        assert word in status, status
    # What could be read stays: the findings beside a broken benchmark, and the other way round.
    dropped_findings = "findings" in words
    assert (window.diagnosis is None) == dropped_findings
    assert (window.bench_result is None) == ("benchmark" in words)
    if not dropped_findings:
        assert [f.code for f in listed(window)] == ["half-on-cpu"]


def test_a_readable_session_opens_with_its_results_and_drops_nothing(qtbot, tmp_path):
    window = opened(qtbot, session_file(tmp_path, SPEC, DIAGNOSIS, BENCH))
    assert [f.code for f in listed(window)] == ["half-on-cpu"]
    assert window.bench_result == BenchResult.from_json(BENCH)
    assert "without" not in window.controller.status
    # The report is made from the results read back typed, without the model.
    page = tmp_path / "report.html"
    assert window.controller.write_report(page)
    text = page.read_text()
    assert "half-on-cpu" in text and 'id="bench"' in text and "no kernel" in text


def nested(levels):
    value = 1
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("spec, diagnosis_doc, words", [
    ({**SPEC, "colour": "red"}, DIAGNOSIS, ["unknown key", "colour"]),
    ({**SPEC, "model_dtype": None}, DIAGNOSIS, ["model_dtype"]),
    ("m", DIAGNOSIS, ["spec"]),
    # Nested past what any reader of it could walk: no file fp16studio writes is like this.
    (SPEC, finding(evidence=nested(400)), ["nested too deeply"]),
])
def test_a_session_that_cannot_be_read_is_refused_in_one_line(qtbot, tmp_path, spec, diagnosis_doc, words):
    warned = []
    window = MainWindow(SPEC)
    qtbot.addWidget(window)
    window.controller.warned.connect(lambda title, text: warned.append((title, text)))
    with qtbot.waitSignal(window.diagnosisFailed, timeout=OPEN_TIMEOUT_MS) as failed:
        window.open_path(str(session_file(tmp_path, spec, diagnosis_doc, BENCH)))
    message = failed.args[0]
    assert "\n" not in message and "crafted.fp16studio" in message, message
    for word in words:
        assert word in message, message
    assert warned == [("Cannot open", message)]
    assert window.spec == PipelineSpec.from_dict(SPEC)   # the window keeps what it had
