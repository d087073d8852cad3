"""The exported script is proven by running it: each case is exported, run in a subprocess, and
its output compared with the in-app forward pass of the same spec (or its failure with the
in-app failure, since the script reproduces the pipeline's mistakes too)."""

import json
import os
import py_compile
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from fp16studio.core import InputError, PipelineSpec, export_script
from fp16studio.core.demo.pipelines import DEMOS, demo_spec

FAILING_DEMOS = ("map-cast", "fp16-inputs", "pil-preprocess", "blind-half", "overflow",
                 "audio-fp16", "half-t5", "csv-labels", "auto-bf16")


def variants():
    """Specs beyond the demos, for the paths the demos do not take."""
    return {
        "synthetic-text-labels": demo_spec("blind-half").replace(
            dataset="synthetic", input_dtype=None, with_labels=True),
        "synthetic-images-format-dtype": demo_spec("vit-silent").replace(
            dataset="synthetic", input_dtype=None, format_dtype="float16"),
        "python-format": demo_spec("blind-half").replace(input_dtype=None, format="python"),
        "keep-fp32-autocast": demo_spec("overflow").replace(
            keep_fp32=["bert.encoder.layer.0.intermediate*"], autocast="float16"),
        "auto-class-features": demo_spec("healthy").replace(
            model="models/tiny-bert", dataset="data/texts.jsonl", task="feature-extraction"),
    }


def fixed_specs():
    """Each failing demo after the engine's own fix loop: the applied fixes must work in code."""
    from fp16studio.core.diagnostics.fixing import fix_until_clean

    for name in FAILING_DEMOS:
        report, _ = fix_until_clean(demo_spec(name).replace(device="cpu"))
        assert report.ok, name
        yield f"{name}-fixed", report.spec


CASE_NAMES = [*DEMOS, *(f"{name}-fixed" for name in FAILING_DEMOS),
              "synthetic-text-labels", "synthetic-images-format-dtype", "python-format",
              "keep-fp32-autocast", "auto-class-features"]


@pytest.fixture(scope="module")
def runs(demo_dir, tmp_path_factory):
    """Every case exported and run, the subprocesses in parallel (each imports torch)."""
    folder = tmp_path_factory.mktemp("export")
    env = dict(os.environ, PYTHONWARNINGS="ignore")

    def run(name, spec):
        spec = spec.replace(device="cpu")
        script, saved = folder / f"{name}.py", folder / f"{name}.pt"
        export_script(spec, script)
        proc = subprocess.run([sys.executable, str(script), "--save-output", str(saved)],
                              capture_output=True, text=True, env=env, cwd=folder, timeout=600)
        return spec, script, proc, saved

    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        plain = {name: demo_spec(name) for name in DEMOS} | variants()
        futures = {name: pool.submit(run, name, spec) for name, spec in plain.items()}
        # The fix loop runs here while the first scripts run in the pool.
        futures |= {name: pool.submit(run, name, spec) for name, spec in fixed_specs()}
        results = {name: future.result() for name, future in futures.items()}
    assert sorted(results) == sorted(CASE_NAMES)
    return results


def in_app(spec):
    """(output name, tensor) of the in-app forward pass, or the exception the pipeline raised."""
    from fp16studio.core.data.batch import PipelineFailure
    from fp16studio.core.run.pipeline import forward, prepare, primary_output

    try:
        return primary_output(forward(prepare(spec)))
    except PipelineFailure as exc:
        return exc.exc
    except Exception as exc:  # noqa: BLE001 - the forward pass itself failed: what the script must hit too
        return exc


@pytest.mark.parametrize("name", CASE_NAMES)
def test_script_reproduces_the_in_app_forward_pass(runs, name):
    spec, script, proc, saved = runs[name]
    # What prints is the script's own, nothing of the libraries' chatter (torchao is installed).
    assert "torchao" not in proc.stderr and "_pytree" not in proc.stderr, proc.stderr[-3000:]
    expected = in_app(spec)
    if isinstance(expected, Exception):
        assert proc.returncode != 0, proc.stdout
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(f"{type(expected).__name__}: "), last
        assert str(expected).splitlines()[0] in last
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    output_name, value = expected
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary == {"output": output_name, "dtype": str(value.dtype).removeprefix("torch."),
                       "shape": list(value.shape), "finite": bool(torch.isfinite(value).all())}
    scripted = torch.load(saved)
    assert scripted.dtype == value.dtype and scripted.shape == value.shape
    torch.testing.assert_close(scripted, value.cpu(), equal_nan=True)


def test_the_cases_cover_failures_successes_and_fixes(runs):
    outcomes = {name: proc.returncode == 0 for name, (_, _, proc, _) in runs.items()}
    assert not outcomes["map-cast"] and outcomes["map-cast-fixed"]
    assert not outcomes["python-format"] and outcomes["healthy"]
    # The overflow demo runs but its logits are not finite; bfloat16 (its fix) makes them so.
    overflow = json.loads(runs["overflow"][2].stdout.strip().splitlines()[-1])
    fixed = json.loads(runs["overflow-fixed"][2].stdout.strip().splitlines()[-1])
    assert (overflow["finite"], fixed["finite"]) == (False, True)


def test_scripts_compile_and_use_todays_apis(runs):
    for name, (spec, script, _, _) in runs.items():
        py_compile.compile(str(script), doraise=True)
        text = script.read_text()
        assert "torch_dtype=" not in text and "torch.cuda.amp" not in text, name
        assert ".from_pretrained(MODEL, dtype=" in text
        assert "torch.inference_mode()" in text and '"--device"' in text
        if spec.format == "torch":
            assert 'with_format("torch"' in text
        if spec.autocast:
            assert f"torch.autocast(device_type, dtype=torch.{spec.autocast})" in text


def test_applied_fixes_are_named_in_comments(runs):
    text = runs["map-cast-fixed"][1].read_text()
    assert "# Fixes applied in fp16studio" in text
    assert "#   1. Cast the floating inputs to float16 [cast-inputs-float16]" in text
    assert "if v.is_floating_point() else v" in text  # and the fix is in the code


def test_fix_with_edits_is_marked_where_it_acts(demo_dir):
    fix = {"id": "keep-fp32", "title": "Keep the FFN in float32", "explain": "It overflows.",
           "edits": {"keep_fp32": ["*.intermediate"]}}
    spec = demo_spec("overflow").replace(keep_fp32=["*.intermediate"], applied_fixes=[fix])
    text = export_script(spec)
    lines = text.splitlines()
    marker = lines.index("    # Fix applied: Keep the FFN in float32 [keep-fp32]")
    assert "KEEP_FP32" in "\n".join(lines[marker:marker + 5])
    assert "#      It overflows." in text


def test_user_text_cannot_break_out_of_comments_or_strings(demo_dir, tmp_path):
    hostile = 'x"""\nimport os; os.remove("/")  # \'\\'
    spec = demo_spec("healthy").replace(applied_fixes=[{"id": hostile, "title": hostile}])
    text = export_script(spec, tmp_path / "s.py")
    compile(text, "s.py", "exec")
    assert not any(line.startswith("import os;") for line in text.splitlines())


def test_local_paths_are_absolute(demo_dir):
    spec = demo_spec("pil-preprocess")
    assert not Path(spec.model).is_absolute()
    text = export_script(spec)
    namespace = {}
    constants = [line for line in text.splitlines() if line.startswith(("MODEL =", "DATASET ="))]
    exec("\n".join(constants), namespace)
    for key in ("MODEL", "DATASET"):
        assert Path(namespace[key]).is_absolute() and Path(namespace[key]).exists()
    assert repr(str((demo_dir / "preprocess.py").resolve()))[1:-1] in text


def test_path_is_written_and_overwritten(demo_dir, tmp_path):
    path = tmp_path / "script.py"
    path.write_text("old")
    text = export_script(demo_spec("healthy"), path)
    assert path.read_text() == text


def test_missing_model_is_an_input_error(tmp_path):
    spec = PipelineSpec(model="nobody/no-such-model", dataset="synthetic")
    with pytest.raises(InputError, match="no-such-model"):
        export_script(spec)


# -- issue 10: audio, model_cast, label_dtype, autocast_device -----------------------------------

# Beyond the demos (which cover audio folders, model_cast, label_dtype, autocast_device, auto).
PIPELINE_CASES = ("whisper-audio-folder", "saved-audio-column", "clip-text-and-images")


@pytest.fixture(scope="module")
def pipeline_runs(demo_dir, zoo, tmp_path_factory):
    """The pipelines issue 10 made expressible, exported and run like the demos above."""
    import datasets
    from zoo import write_clips

    folder = tmp_path_factory.mktemp("export-pipelines")
    clips = write_clips(folder / "clips")
    paths = sorted(str(p) for p in clips.rglob("*.*"))
    datasets.Dataset.from_dict({"speech": paths}).cast_column(
        "speech", datasets.Audio()).save_to_disk(str(folder / "saved"))
    images = datasets.load_from_disk(str(demo_dir / "data/images"))["train"].select(range(4))
    images.add_column("caption", ["a cat", "a dog", "a bird", "two cats"]).save_to_disk(
        str(folder / "captions"))
    specs = {
        "whisper-audio-folder": PipelineSpec.from_dict(
            {"model": str(zoo["whisper"]), "dataset": str(clips), "sampling_rate": 16000}),
        "saved-audio-column": PipelineSpec.from_dict(
            {"model": str(zoo["wav2vec2"]), "dataset": str(folder / "saved"),
             "columns": {"audio": "speech"}}),
        "clip-text-and-images": PipelineSpec.from_dict(
            {"model": str(zoo["clip"]), "dataset": str(folder / "captions"),
             "columns": {"text": "caption"}, "model_dtype": "bfloat16"}),
    }
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    results = {}
    for name, spec in specs.items():
        spec = spec.replace(device="cpu")
        script, saved = folder / f"{name}.py", folder / f"{name}.pt"
        export_script(spec, script)
        results[name] = (spec, script, subprocess.run(
            [sys.executable, str(script), "--save-output", str(saved)], capture_output=True,
            text=True, env=env, cwd=folder, timeout=600, check=False), saved)
    return results


@pytest.mark.parametrize("name", PIPELINE_CASES)
def test_script_reproduces_the_in_app_pipeline(pipeline_runs, name):
    spec, _, proc, saved = pipeline_runs[name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    output_name, value = in_app(spec)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary == {"output": output_name, "dtype": str(value.dtype).removeprefix("torch."),
                       "shape": list(value.shape), "finite": bool(torch.isfinite(value).all())}
    torch.testing.assert_close(torch.load(saved), value.cpu(), equal_nan=True)


def test_scripts_write_the_pipeline_the_way_the_user_did(runs, pipeline_runs):
    text = {name: run[1].read_text() for name, run in (runs | pipeline_runs).items()}
    cast = "\n    model.half()\n"  # the line of code (the fix's comment names it too)
    assert cast in text["half-t5"] and cast not in text["half-t5-fixed"]
    assert 'batch["labels"] = batch["labels"].long()' in text["csv-labels-fixed"]
    assert 'device_type = "cuda"' in text["autocast-cuda"]
    assert 'dtype="auto"' in text["auto-bf16"]
    assert "import soundfile" in text["whisper-audio-folder"]
    assert 'Audio(decode=False)' in text["saved-audio-column"]
    assert "processor(text=rows[" in text["clip-text-and-images"]
    assert "AutoProcessor.from_pretrained" in text["clip-text-and-images"]


def test_a_preprocess_that_makes_the_inputs_and_the_labels_exports_and_runs(demo_dir, tmp_path):
    """No column the processor takes and no label column in the rows: the user's function makes
    `input_ids` and `labels`. The script must be valid Python, leave both to the function, and
    run to the in-app output."""
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"n": i, "y": i % 2}) + "\n" for i in range(8)))
    (tmp_path / "pre.py").write_text(
        "def fn(example):\n"
        "    ids = [1 + (example['n'] + k) % 50 for k in range(6)]\n"
        "    return {'input_ids': ids, 'attention_mask': [1] * 6, 'labels': example['y']}\n")
    spec = PipelineSpec(model=str(demo_dir / "models/tiny-bert"), dataset="data.jsonl",
                        preprocess="pre.py:fn", with_labels=True, device="cpu", base_dir=str(tmp_path))
    script = tmp_path / "out.py"
    export_script(spec, script)
    py_compile.compile(str(script), doraise=True)
    proc = subprocess.run([sys.executable, str(script), "--save-output", str(tmp_path / "out.pt")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    name, value = in_app(spec)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["output"] == name
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), value.cpu())
