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
from fp16studio.core.demo import DEMOS, demo_spec

FAILING_DEMOS = ("map-cast", "fp16-inputs", "pil-preprocess", "blind-half", "overflow")


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
    from fp16studio.core.fixing import fix_until_clean

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
    from fp16studio.core.data import PipelineFailure
    from fp16studio.core.pipeline import forward, prepare, primary_output

    try:
        return primary_output(forward(prepare(spec)))
    except PipelineFailure as exc:
        return exc.exc
    except Exception as exc:  # noqa: BLE001 - the forward pass itself failed: what the script must hit too
        return exc


@pytest.mark.parametrize("name", CASE_NAMES)
def test_script_reproduces_the_in_app_forward_pass(runs, name):
    spec, script, proc, saved = runs[name]
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
