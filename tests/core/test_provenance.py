"""Where a model's dtype came from (`evidence.provenance`, CONTRACT §2), and the first fix it picks.

Each script is first run with plain python, failing the way the trace then says; the trace's
first fix, written into the script at the line the provenance names, makes plain python run it
clean. A dtype the script asked for itself (`dtype=`) changes nothing.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fp16studio.core import diagnose
from fp16studio.core.demo.pipelines import demo_spec
from fp16studio.core.script.trace import trace_script

SCRIPTS = Path(__file__).parent.parent / "scripts"
# float32's name in a kernel's message: `torch.FloatTensor`, `Float`, `float` (not `BFloat16`).
FLOAT32 = re.compile(r"(?<!B)Float(?!16)|\bfloat\b")


def fails_on_a_dtype_clash(run: subprocess.CompletedProcess, half: str):
    """Plain python stopped at a clash of `half` ("Half", "BFloat16") with float32. Not one
    wording: it varies by the CPU's kernel path (`Input type (torch.HalfTensor) and weight
    type ...`, `expected scalar type Half but found Float`, `mat1 and mat2 must have the same
    dtype ...`: FAILURES.md), so the message is only asked to name both dtypes."""
    last = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""
    assert run.returncode == 1 and last.startswith("RuntimeError: "), run.stderr
    assert half in last and FLOAT32.search(last.replace(half, "")), last


def line_of(script: Path, text: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if text in line)


def at(script: Path, marker: str) -> dict:
    return {"file": str(script), "line": line_of(script, marker)}


def plain(script: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def with_line(script: Path, line: int, code: str, folder: Path) -> Path:
    """A copy of the script with its line `line` replaced by `code` (a fix's code comes at the
    line's own indentation)."""
    lines = script.read_text().splitlines()
    lines[line - 1] = code
    fixed = folder / script.name
    fixed.write_text("\n".join(lines) + "\n")
    return fixed


def the_mismatch(result):
    first = result.findings[0]
    assert (first.code, first.severity) == ("dtype-mismatch", "error"), result.findings
    return first


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory):
    """A tiny image classifier stored in bfloat16, as many Hub checkpoints are."""
    from transformers import AutoModelForImageClassification, ResNetConfig

    torch.manual_seed(0)
    config = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                          num_labels=3)
    folder = tmp_path_factory.mktemp("ckpt") / "resnet-bf16"
    AutoModelForImageClassification.from_config(config, dtype=torch.bfloat16).save_pretrained(folder)
    return folder


def test_from_config_takes_the_configs_bfloat16_and_the_first_fix_builds_in_float32(tmp_path):
    script = SCRIPTS / "provenance_from_config.py"
    run = plain(script)
    fails_on_a_dtype_clash(run, "BFloat16")
    result = trace_script(script)
    f = the_mismatch(result)
    assert f.location == "resnet.embedder.embedder.convolution"
    assert f.source == at(script, "# the forward") == result.error.source
    assert f.evidence["provenance"] == {"dtype": "bfloat16", "from": "config",
                                        "source": at(script, "# the build"), "training": True}
    assert "from_config took the config's dtype" in f.message
    assert [fix.id for fix in f.fixes][:2] == ["from-config-float32", "cast-inputs-bfloat16"]
    code = f.fixes[0].code_text()
    assert code.startswith("model = AutoModelForImageClassification.from_config(config, "
                           "dtype=torch.float32)")
    fixed = plain(with_line(script, at(script, "# the build")["line"], code, tmp_path))
    assert fixed.returncode == 0, fixed.stderr


def test_set_default_dtype_half_is_named_and_undone_first(tmp_path):
    script = SCRIPTS / "provenance_default_dtype.py"
    run = plain(script)
    fails_on_a_dtype_clash(run, "Half")
    result = trace_script(script)
    f = the_mismatch(result)
    assert f.location == "0" and f.source == at(script, "# the forward")
    origin = {"dtype": "float16", "from": "default-dtype", "source": at(script, "# the default"),
              "training": True}
    assert f.evidence["provenance"] == origin
    assert "torch.set_default_dtype(torch.float16)" in f.message
    assert f.fixes[0].id == "default-dtype-float32"
    code = f.fixes[0].code_text()
    assert code.startswith("torch.set_default_dtype(torch.float32)")
    # float16 on a CPU: the same origin, the same first fix.
    on_cpu = next(x for x in result.findings if x.code == "half-on-cpu")
    assert on_cpu.evidence["provenance"] == origin and on_cpu.fixes[0].id == "default-dtype-float32"
    fixed = plain(with_line(script, origin["source"]["line"], code, tmp_path))
    assert fixed.returncode == 0, fixed.stderr


def test_half_inputs_from_the_default_dtype_against_a_float32_checkpoint(tmp_path_factory,
                                                                       tmp_path):
    """transformers 5 loads a float32 checkpoint in float32 whatever the default dtype; the images
    made after set_default_dtype(float16) are float16: the default is undone first."""
    from transformers import AutoModelForImageClassification, ResNetConfig

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("ckpt") / "resnet-fp32"
    AutoModelForImageClassification.from_config(
        ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                     num_labels=3), dtype=torch.float32).save_pretrained(folder)
    script = SCRIPTS / "provenance_default_inputs.py"
    run = plain(script, folder)
    fails_on_a_dtype_clash(run, "Half")
    f = the_mismatch(trace_script(script, [folder]))
    assert f.source == at(script, "# the forward")
    origin = {"dtype": "float16", "from": "default-dtype", "source": at(script, "# the default"),
              "training": False}
    assert f.evidence["provenance"] == origin and "set_default_dtype" in f.message
    assert [fix.id for fix in f.fixes][:2] == ["default-dtype-float32", "model-float16"]
    fixed = plain(with_line(script, origin["source"]["line"], f.fixes[0].code_text(), tmp_path),
                  folder)
    assert fixed.returncode == 0, fixed.stderr


def test_a_half_checkpoint_loaded_without_dtype_to_train_is_loaded_in_float32(bf16_checkpoint,
                                                                              tmp_path):
    script = SCRIPTS / "provenance_checkpoint.py"
    run = plain(script, bf16_checkpoint, "train")
    fails_on_a_dtype_clash(run, "BFloat16")
    result = trace_script(script, [bf16_checkpoint, "train"])
    f = the_mismatch(result)
    assert f.source == at(script, "loss = model(pixel_values")
    assert f.evidence["provenance"] == {"dtype": "bfloat16", "from": "checkpoint",
                                        "source": at(script, "# the load"), "training": True}
    assert f.fixes[0].id == "load-float32" and f.fixes[0].edits["model_dtype"] == "float32"
    code = f.fixes[0].code_text()
    assert code.startswith("model = AutoModelForImageClassification.from_pretrained(checkpoint, "
                           "dtype=torch.float32)")
    fixed = plain(with_line(script, at(script, "# the load")["line"], code, tmp_path),
                  bf16_checkpoint, "train")
    assert fixed.returncode == 0, fixed.stderr


def test_the_same_checkpoint_only_run_keeps_its_half_precision(bf16_checkpoint):
    """Not trained (eval mode, no optimizer): the checkpoint's bfloat16 is kept, inputs cast."""
    script = SCRIPTS / "provenance_checkpoint.py"
    run = plain(script, bf16_checkpoint, "eval")
    fails_on_a_dtype_clash(run, "BFloat16")
    f = the_mismatch(trace_script(script, [bf16_checkpoint, "eval"]))
    assert f.source == at(script, "print(model(pixel_values")
    assert f.evidence["provenance"] == {"dtype": "bfloat16", "from": "checkpoint",
                                        "source": at(script, "# the load"), "training": False}
    assert f.fixes[0].id == "cast-inputs-bfloat16"


def test_an_explicit_dtype_changes_nothing():
    script = SCRIPTS / "provenance_explicit.py"
    assert plain(script, "float32").returncode == 0
    clean = trace_script(script, ["float32"])
    assert clean.ok and clean.error is None and clean.findings == []
    run = plain(script, "bfloat16")
    fails_on_a_dtype_clash(run, "BFloat16")
    f = the_mismatch(trace_script(script, ["bfloat16"]))
    assert f.evidence["provenance"] == {"dtype": "bfloat16", "from": "dtype-argument",
                                        "source": at(script, "# the build"), "training": True}
    # The script asked for bfloat16 itself: half precision stays, the inputs are cast.
    assert [fix.id for fix in f.fixes] == ["cast-inputs-bfloat16", "autocast-bfloat16",
                                           "model-float32"]
    assert "from_config took" not in f.message


@pytest.mark.parametrize("keys, origin", [
    ({"model_cast": "float16"}, "cast"),
    ({"model_dtype": "float16"}, "dtype-argument"),
])
def test_a_spec_run_says_the_provenance_its_spec_gives(demo_dir, keys, origin):
    report = diagnose(demo_spec("healthy").replace(**keys))
    f = next(f for f in report.findings if f.code == "dtype-mismatch")
    assert f.evidence["provenance"] == {"dtype": "float16", "from": origin, "source": None,
                                        "training": False}
    assert f.fixes[0].id == "cast-inputs-float16"   # asked for: half precision stays


def test_a_spec_run_with_model_dtype_auto_says_checkpoint(demo_dir, tmp_path):
    from transformers import AutoImageProcessor, ResNetForImageClassification

    from fp16studio.core import PipelineSpec

    source, folder = demo_dir / "models/tiny-resnet", tmp_path / "resnet-bf16"
    ResNetForImageClassification.from_pretrained(source, dtype=torch.bfloat16).save_pretrained(folder)
    AutoImageProcessor.from_pretrained(source).save_pretrained(folder)
    spec = PipelineSpec.from_dict({"model": str(folder), "dataset": str(demo_dir / "data/images"),
                                   "model_dtype": "auto"})
    f = next(f for f in diagnose(spec).findings if f.code == "dtype-mismatch")
    assert f.evidence["provenance"] == {"dtype": "bfloat16", "from": "checkpoint", "source": None,
                                        "training": False}
    assert f.fixes[0].id == "cast-inputs-bfloat16"
    assert "transformers 5 loads the checkpoint's own dtype, bfloat16" in f.message
