"""Hardening, round 5 (issue 44): consent that names and pins every source of code, exit codes
that say what happened, an FP8 plan that measures what it plans, and bench verdicts that never
praise a broken or unsteady variant."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fp16studio.cli import main


# -- class 1: consent names every source of code ------------------------------------------------------
def _remote_module(mark):
    return (f"import pathlib\npathlib.Path({str(mark)!r}).write_text('ran')\n"
            "from transformers import BertForSequenceClassification\n\n\n"
            "class OwnModel(BertForSequenceClassification):\n    pass\n")


def _publish(hub, commit, code):
    """`someone/remote` in a Hugging Face cache, its "main" at `commit` holding `code`."""
    repo = hub / "models--someone--remote"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "modeling_remote.py").write_text(code)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)


@pytest.fixture
def hub_code(demo_dir, tmp_path, monkeypatch):
    """A received spec whose local model folder's auto_map names code in a Hub repository
    (`someone/remote--modeling_remote.OwnModel`), the repository in the HF cache."""
    import huggingface_hub.constants

    hub = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))   # transformers' copies
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    work = tmp_path / "work"
    shutil.copytree(demo_dir / "models/tiny-bert", work / "model")
    config = json.loads((work / "model/config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "someone/remote--modeling_remote.OwnModel"}
    (work / "model/config.json").write_text(json.dumps(config))
    _publish(hub, "a" * 40, _remote_module(tmp_path / "first.txt"))
    spec = work / "spec.json"
    spec.write_text(json.dumps({"model": "model", "dataset": "synthetic", "samples": 4,
                                "task": "sequence-classification", "trust_remote_code": True}))
    monkeypatch.chdir(work)   # transformers reads a `folder--` reference from the working folder
    return spec, hub


def test_consent_names_a_hub_repository_the_auto_map_names_with_its_revision(hub_code):
    from fp16studio.core.spec import trust
    from fp16studio.core.spec.documents import load_spec

    spec_path, hub = hub_code
    question = trust.consent_needed(spec_path, load_spec(spec_path))
    assert "'someone/remote'" in question and "a" * 40 in question
    trust.require(spec_path, load_spec(spec_path), grant=True)
    assert trust.consent_needed(spec_path, load_spec(spec_path)) is None
    _publish(hub, "b" * 40, _remote_module(hub / "second.txt"))   # the revision moves
    question = trust.consent_needed(spec_path, load_spec(spec_path))
    assert question is not None and "b" * 40 in question


def test_a_moved_hub_revision_runs_nothing_until_asked_again(hub_code, tmp_path, capsys):
    spec_path, hub = hub_code
    run = [sys.executable, "-m", "fp16studio", "diagnose", str(spec_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([*run, "--trust"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "first.txt").exists()
    _publish(hub, "b" * 40, _remote_module(tmp_path / "second.txt"))
    proc = subprocess.run(run, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2 and "b" * 40 in proc.stderr and "--trust" in proc.stderr
    assert not (tmp_path / "second.txt").exists()


def test_a_hub_repository_not_in_the_cache_is_refused_before_anything_runs(hub_code, tmp_path, capsys):
    spec_path, hub = hub_code
    shutil.rmtree(hub)
    assert main(["diagnose", str(spec_path), "--trust"]) == 2
    err = capsys.readouterr().err
    assert "'someone/remote'" in err and "hf download someone/remote" in err and err.count("\n") == 1
    assert not (tmp_path / "first.txt").exists()


def test_trace_imports_nothing_from_the_working_folder(tmp_path):
    """`cd work; fp16studio trace sub/train.py`: a module in work/ is not the script's (`python
    sub/train.py` never imports it), so the trace child never imports it."""
    mark = tmp_path / "imported.txt"
    for module in ("fp16studio", "typing_extensions", "runpy"):
        (tmp_path / f"{module}.py").write_text(
            f"import pathlib\npathlib.Path({str(mark)!r}).write_text({module!r})\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text("import sys\nprint('ran', sys.path[0])\n")
    # As the `fp16studio` command starts: no working folder on its own path (-P).
    import fp16studio

    env = {**os.environ, "PYTHONPATH": str(Path(fp16studio.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-P", "-m", "fp16studio", "trace", "sub/train.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"ran {tmp_path / 'sub'}" in done.stdout
    assert not mark.exists()


# -- class 7: a broken variant gets a finding, never a verdict --------------------------------------
def test_bench_of_a_variant_whose_output_overflows_makes_a_finding_not_a_verdict(demo_dir, numerics_models):
    from fp16studio.core.precision.bench import benchmark
    from fp16studio.core.diagnostics.report import Diagnosis
    from fp16studio.core.present.html import render_report
    from fp16studio.core.present.terminal import format_bench

    from numerics_zoo import text_spec

    spec = text_spec(demo_dir, numerics_models["overflow-bert4"], samples=4, batch_size=4)
    result = benchmark(spec, ["float32", "float16"], warmup=1, min_iterations=2, min_seconds=0.0,
                       min_rounds=2)
    half = result.variants[1]
    assert half.ok and half.nonfinite_outputs
    assert [(f.code, f.evidence["variant"]) for f in result.findings] == [("overflow", "float16")]
    assert "float16 is not ranked" in result.verdict and "x float32" not in result.verdict
    assert "float32's speed" not in half.verdict
    doc = result.to_json()
    assert doc["findings"][0]["code"] == "overflow"
    text = format_bench(result)
    assert "overflow" in text and "inf/NaN" in text
    page = render_report(Diagnosis(spec, "cpu"), result)
    assert "The float16 variant&#x27;s output" in page or "The float16 variant's output" in page


# -- class 5: the FP8 plan measures what it plans ----------------------------------------------------
def test_the_fp8_plan_skips_zero_width_layers_hooks_keyword_calls_and_refuses_non_finite_ones():
    import torch

    from fp16studio.core.diagnostics.rules import fp8 as fp8_rules
    from fp16studio.core.precision.fp8 import LinearProbe, probed_layers
    from fp16studio.core.precision.fp8_plan import decide

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(32, 32)
            self.empty = torch.nn.Linear(0, 32)
            self.broken = torch.nn.Linear(32, 32)

        def forward(self, x):
            h = self.a(input=x)                  # called with a keyword
            h = h + self.empty(x[..., :0])        # nn.Linear(0, 32): its bias alone
            return self.broken(h)

    torch.manual_seed(0)
    net = Net().to(torch.bfloat16)
    with torch.no_grad():
        net.broken.weight[0, 0] = float("nan")
    probes = [LinearProbe(name, module, "tensorwise", None) for name, module in net.named_modules()
              if type(module) is torch.nn.Linear]
    with torch.no_grad():
        net(torch.randn(4, 8, 32, dtype=torch.bfloat16))
    layers = {layer.name: layer for layer in probed_layers(list(probes))}
    decide(list(layers.values()))
    assert layers["a"].flops and layers["a"].eligible
    assert not layers["empty"].eligible and "zero-width" in layers["empty"].reason
    assert not layers["broken"].eligible and "inf/NaN" in layers["broken"].reason
    findings = fp8_rules.plan_findings(list(layers.values()), 20.0, "tensorwise", "cpu",
                                       (True, True, ""), None)
    assert [(f.code, f.location) for f in findings] == [("overflow", "broken")]


def test_the_fp8_plan_runs_a_keep_fp32_spec_as_diagnose_runs_it(demo_dir, tmp_path, capsys):
    spec = tmp_path / "keep.json"
    spec.write_text(json.dumps({"model": str(demo_dir / "models/tiny-bert"), "samples": 4,
                                "dataset": str(demo_dir / "data/texts.jsonl"), "autocast": "bfloat16",
                                "model_dtype": "float32", "keep_fp32": ["classifier"]}))
    assert main(["diagnose", str(spec)]) == 0
    capsys.readouterr()
    assert main(["fp8", str(spec), "--json"]) == 0, capsys.readouterr().err
    layers = {layer["name"]: layer for layer in json.loads(capsys.readouterr().out)["layers"]}
    assert layers["classifier"]["in_features"] and "bert.pooler.dense" in layers


# -- class 6: exit codes ------------------------------------------------------------------------------
def _cache_write_fails(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/cache/datasets/cache-1.arrow")


@pytest.mark.parametrize("command", [["diagnose"], ["drift"], ["fp8"], ["bench", "--variants", "float32"],
                                     ["report", "-o", "{out}"]])
def test_a_full_disk_while_datasets_writes_its_cache_is_disk_full_for_every_command(
        demo_dir, tmp_path, monkeypatch, capsys, command):
    import datasets

    monkeypatch.setattr(datasets.Dataset, "map", _cache_write_fails)
    args = [a.format(out=tmp_path / "r.html") for a in command]
    assert main([args[0], str(demo_dir / "overflow.json"), *args[1:]]) == 2
    err = capsys.readouterr().err
    assert "disk full" in err and err.count("\n") == 1, err


def test_a_file_size_limit_is_disk_full_too(tmp_path, monkeypatch, capsys):
    import transformers.modeling_utils
    from safetensors import SafetensorError

    def too_large(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: File too large (os error 27)")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", too_large)
    assert main(["demo", str(tmp_path / "demo")]) == 2
    err = capsys.readouterr().err
    assert "disk full" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("keys", [{"preprocess": "pre.py:fn"}, {"batch_size": 10**30}],
                         ids=["preprocess-raises", "huge-batch"])
def test_fp8_says_a_failed_pipeline_in_one_line_with_exit_1(demo_dir, tmp_path, capsys, keys):
    (tmp_path / "pre.py").write_text("def fn(example):\n    raise ValueError('my preprocess broke')\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": str(demo_dir / "models/tiny-bert"), "samples": 4,
                                "dataset": str(demo_dir / "data/texts.jsonl"), **keys}))
    assert main(["fp8", str(spec), "--trust"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fp16studio: the pipeline failed at batch: ") and err.count("\n") == 1, err


def test_an_interrupted_force_leaves_no_backup_that_blocks_the_next(demo_dir, tmp_path, monkeypatch, capsys):
    from fp16studio.core.precision import fp8

    old = tmp_path / "old.py"
    old.write_text("print('mine')\n")
    spec = str(demo_dir / "overflow.json")
    real = fp8.fp8_plan

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(fp8, "fp8_plan", interrupted)
    assert main(["fp8", spec, "--export", str(old), "--force"]) == 130
    assert old.read_text() == "print('mine')\n" and not (tmp_path / "old.py.bak").exists()
    monkeypatch.setattr(fp8, "fp8_plan", real)
    assert main(["fp8", spec, "--export", str(old), "--force"]) in (0, 1), capsys.readouterr().err
    assert (tmp_path / "old.py.bak").read_text() == "print('mine')\n"
    assert "convert_to_float8_training" in old.read_text()


def test_export_takes_a_label_column_the_specs_own_preprocess_makes(demo_dir, tmp_path, capsys):
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"text": f"row {i}"}) + "\n" for i in range(4)))
    (tmp_path / "pre.py").write_text("def fn(example):\n    return {**example, 'labels': len(example['text']) % 3}\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": str(demo_dir / "models/tiny-bert"), "dataset": "rows.jsonl",
                                "preprocess": "pre.py:fn", "columns": {"label": "labels"},
                                "with_labels": True, "samples": 4}))
    assert main(["diagnose", str(spec), "--trust"]) == 0, capsys.readouterr().err
    assert main(["export", str(spec), "-o", str(tmp_path / "run.py")]) == 0, capsys.readouterr().err


# -- class 2 (parts): trace changes nothing the script sees ------------------------------------------
@pytest.mark.parametrize("library", ["peft", "lightning"])
def test_a_module_of_the_scripts_own_named_like_a_library_is_not_that_library(tmp_path, library):
    from fp16studio.core.script.trace import trace_script

    (tmp_path / f"{library}.py").write_text("HELPER = 1\n")
    script = tmp_path / "train.py"
    script.write_text(f"import torch\nimport {library}\n\n"
                      "net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))\n"
                      f"print(net(torch.randn(2, 8)).shape, {library}.HELPER)\n")
    result = trace_script(script)
    assert [m["class"] for m in result.models] == ["Sequential"], result.notes
    assert not any("fp16studio" in note and "bug" in note for note in result.notes), result.notes


def test_a_wrapped_library_function_keeps_its_identity(tmp_path):
    pytest.importorskip("peft")
    from fp16studio.core.script.trace import trace_script

    script = tmp_path / "names.py"
    script.write_text("import peft\nfrom peft import prepare_model_for_kbit_training as p\n"
                      "from peft.peft_model import PeftModel\n"
                      "print('names', p.__name__, p.__module__, PeftModel.__init__.__qualname__)\n")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    said = next(line for line in plain.stdout.splitlines() if line.startswith("names"))
    lines = []
    trace_script(script, output=lambda stream, line: lines.append(line))
    assert said in lines
