"""`fp16studio trace` on scripts that end oddly, notebooks, compiled models and output that is
not UTF-8 (issue 22)."""

import subprocess
import sys
from pathlib import Path

import pytest

from fp16studio.core.common.errors import InputError
from fp16studio.core.script.trace import trace_script

SCRIPTS = Path(__file__).parent.parent / "scripts"


def test_a_notebook_is_said_to_be_one_with_how_to_convert_it(tmp_path):
    notebook = tmp_path / "train.ipynb"
    notebook.write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    with pytest.raises(InputError, match="Jupyter notebook.*nbconvert --to script train.ipynb"):
        trace_script(notebook)
    done = subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(notebook)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def test_script_output_bytes_pass_through_unchanged(tmp_path):
    script = tmp_path / "latin1.py"
    script.write_text('import sys\nsys.stdout.buffer.write(b"caf\\xe9 \\xff\\r\\n")\n'
                      'sys.stderr.buffer.write(b"err \\xe9\\n")\n')
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=60)
    traced = subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(script)],
                            capture_output=True, timeout=120)
    assert traced.stdout.startswith(plain.stdout), traced.stdout
    assert plain.stderr in traced.stderr


def test_a_model_that_ran_before_os_exit_0_is_diagnosed():
    result = trace_script(SCRIPTS / "exits_after_model.py")
    assert [m["class"] for m in result.models] == ["Sequential"]
    assert result.error is None and result.output is not None
    assert any("os._exit" in note for note in result.notes)
    assert not any("no model ran" in note for note in result.notes)


def test_the_timeout_counts_from_the_script_start_and_keeps_the_model_that_ran():
    # 1 s is shorter than fp16studio's own start in the child (torch loads): the script still
    # gets its second, runs its model, and is stopped in its sleep.
    result = trace_script(SCRIPTS / "model_then_sleeps.py", timeout=1.0)
    assert result.error.type == "Timeout"
    assert [m["class"] for m in result.models] == ["Sequential"]
    assert result.output is not None


def test_a_compiled_model_runs_under_trace_as_under_python_with_a_note():
    script = SCRIPTS / "compiled_model.py"
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=300)
    assert "ok (4, 2) torch.float32" in plain.stdout
    result = trace_script(script)
    assert result.ok and result.error is None, result.error
    assert any("torch.compile" in note for note in result.notes)
