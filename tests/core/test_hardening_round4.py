"""Hostile and odd input, round 4 (issue 32): consent that follows the code, the user's
processes and files, malformed models and configs, the training watch, and the words.

Bad input exits 2 with one line (never 3, never a traceback); what could hang runs in a child
process with a bound."""

import errno
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fp16studio.cli import main
from fp16studio.core.script.trace import trace_script

SCRIPTS = Path(__file__).parent.parent / "scripts"
CHILD_TIMEOUT_S = 120


def run_cli(*args, timeout=CHILD_TIMEOUT_S, **kwargs):
    return subprocess.run([sys.executable, "-m", "fp16studio", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def assert_one_line(err: str, *words):
    assert err.startswith("fp16studio: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, err


# -- the training watch -----------------------------------------------------------------------------
def plain_losses(script: Path) -> list[float]:
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, check=True)
    return [float(x) for x in re.findall(r"loss ([-\d.]+)", done.stdout)]


def test_a_closure_step_is_the_first_optimizer_step_with_the_loss_it_returned():
    script = SCRIPTS / "train_lbfgs_closure.py"
    losses = plain_losses(script)
    steps = trace_script(script).to_json()["steps"]
    assert [s["index"] for s in steps] == [0, 1]
    assert [s["loss"] for s in steps] == pytest.approx(losses[:2], rel=1e-5)


def test_sparse_gradients_are_measured_not_a_traceback_of_ours():
    script = SCRIPTS / "train_sparse_adam.py"
    losses = plain_losses(script)
    result = trace_script(script)
    assert result.error is None, result.error
    assert [s["loss"] for s in result.to_json()["steps"]] == pytest.approx(losses[:2], rel=1e-5)
    node = result.tree.find("gradients.0")   # the sparse Embedding's gradient, its stored values
    assert node.kind == "gradient" and node.status == "ok" and node.nonfinite == 0


# -- the user's processes and files ------------------------------------------------------------------
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone in all but name (our own children are reaped by their parent).
    with open(f"/proc/{pid}/stat") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0] != "Z"


def _as_in_a_terminal():
    # trace as a terminal starts it: SIGINT (Ctrl-C) and SIGHUP at their defaults. A shell's
    # background job, such as a CI run started with `&`, ignores SIGINT, a run under `nohup`
    # ignores SIGHUP, and Python keeps an inherited SIG_IGN.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_ending_trace_ends_the_script_it_runs(sig, tmp_path):
    pid_file = tmp_path / "pid"
    trace = subprocess.Popen([sys.executable, "-m", "fp16studio", "trace",
                              str(SCRIPTS / "sleeps_with_pid.py"), "--", str(pid_file)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=_as_in_a_terminal)
    try:
        deadline = time.monotonic() + CHILD_TIMEOUT_S
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        script = int(pid_file.read_text())
        trace.send_signal(sig)
        trace.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(script) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(script), f"the script outlived trace ({sig.name})"
    finally:
        trace.kill()
        if pid_file.exists() and pid_file.read_text():
            try:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


OWN_MODEL = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)

    def forward(self, x):
        return (self.l(x) * 0) / (self.l(x) * 0 + 1e-8)
"""


@pytest.mark.parametrize("made", ["exec", "file"])
def test_a_model_class_whose_module_is_named_like_script_is_traced(made, tmp_path):
    """A model class of the user's own whose module is `<script>…`: compiled from a string
    (exec), or a real file of that name loaded by path. Its line is found where it is a file;
    never an error of ours."""
    module = tmp_path / "<script>model.py"
    module.write_text(OWN_MODEL)
    load = (f"ns = {{'__name__': '<script>'}}\nexec(compile({OWN_MODEL!r}, '<script>', 'exec'), ns)\n"
            "Net = ns['Net']\n" if made == "exec" else
            "import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('<script>model', {str(module)!r})\n"
            "own = importlib.util.module_from_spec(spec)\nsys.modules['<script>model'] = own\n"
            "spec.loader.exec_module(own)\nNet = own.Net\n")
    script = tmp_path / "run.py"
    script.write_text(f"import torch\n{load}model = Net().half()\n"
                      "print(model(torch.ones(2, 4, dtype=torch.float16)).sum())\n")
    result = trace_script(script)
    assert result.error is None and result.models[0]["class"] == "Net"
    eps = [f for f in result.findings if f.code == "precision-loss"]
    if made == "file":   # the eps that is 0 in float16 (0/0 is NaN), at its line of the module's file
        assert [f.source["file"] for f in eps] == [str(module)] and eps[0].source["line"] == 11
    else:                # code with no file of its own is not the user's files: not checked
        assert eps == []


def test_a_module_the_script_imports_runs_its_top_level_code_once(demo_dir, tmp_path):
    """The recovered spec names the script's own Dataset.map module as its preprocess; checking
    that spec must not import the module again (its side effects twice)."""
    log = tmp_path / "imported.log"
    demo_scripts = demo_dir / "scripts"
    (tmp_path / "preprocess.py").write_text(
        f"with open({str(log)!r}, 'a') as handle:\n    handle.write('imported\\n')\n"
        + (demo_scripts / "preprocess.py").read_text())
    script = tmp_path / "pil_preprocess.py"
    script.write_text((demo_scripts / "pil_preprocess.py").read_text().replace(
        "Path(__file__).resolve().parent.parent", f"Path({str(demo_dir)!r})"))
    result = trace_script(script)
    assert result.findings and result.recovered_spec is not None, result.notes
    assert result.recovered_spec.preprocess.endswith("preprocess.py:custom_preprocessing")
    assert log.read_text() == "imported\n"


def _symlink_to_a_script(tmp_path, spec):
    real = tmp_path / "real.py"
    assert main(["export", str(spec), "-o", str(real)]) == 0
    link = tmp_path / "link.py"
    link.symlink_to(real)
    return link


def _fifo(tmp_path, spec):
    fifo = tmp_path / "out.py"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize("make", [_symlink_to_a_script, _fifo, lambda t, s: Path("/dev/stdout")],
                         ids=["symlink", "fifo", "/dev/stdout"])
@pytest.mark.parametrize("force", [[], ["--force"]], ids=["", "force"])
def test_an_output_that_is_a_link_pipe_or_device_is_bad_input(make, force, demo_dir, tmp_path,
                                                             capsys):
    spec = demo_dir / "healthy.json"
    output = make(tmp_path, spec)
    capsys.readouterr()
    assert main(["export", str(spec), "-o", str(output), *force]) == 2
    assert_one_line(capsys.readouterr().err, str(output))
    if output.name == "link.py":   # the link is left as it was
        assert output.is_symlink() and output.resolve() == tmp_path / "real.py"


@pytest.mark.parametrize("json_flag", [["--json"], []], ids=["json", "text"])
def test_a_full_stdout_is_bad_input_in_one_line(json_flag):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "fp16studio", "diagnose", "demo:healthy",
                               *json_flag], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=CHILD_TIMEOUT_S)
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "cannot write the output to stdout", "No space left on device")


def _safetensors_disk_full(*args, **kwargs):
    from safetensors import SafetensorError

    raise SafetensorError("Error while serializing: I/O error: No space left on device "
                          "(os error 28)")


def _oserror_disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _transformers_saving():
    import transformers.modeling_utils

    return transformers.modeling_utils


def _dataset_dict():
    import datasets

    return datasets.DatasetDict


@pytest.mark.parametrize("owner, name, fail", [
    (_transformers_saving, "safe_save_file", _safetensors_disk_full),
    (_dataset_dict, "save_to_disk", _oserror_disk_full)], ids=["weights", "dataset"])
def test_the_demo_on_a_full_disk_says_what_it_could_not_write(owner, name, fail, tmp_path,
                                                             monkeypatch, capsys):
    monkeypatch.setattr(owner(), name, fail)
    folder = tmp_path / "demo"
    assert main(["demo", str(folder)]) == 2
    assert_one_line(capsys.readouterr().err, str(folder), "No space left on device")


# -- malformed models and configs ----------------------------------------------------------------
def _model_copy(demo_dir, tmp_path, config=None, weights=None):
    """The demo's tiny BERT with its config.json settings changed, or its weights replaced
    (bytes, or "fifo"); returns (model folder, spec file)."""
    source = demo_dir / "models/tiny-bert"
    model = tmp_path / "model"
    model.mkdir()
    for path in source.iterdir():
        (model / path.name).write_bytes(path.read_bytes())
    if config is not None:
        settings = json.loads((model / "config.json").read_text())
        settings.update(config)
        (model / "config.json").write_text(json.dumps(settings))
    if weights is not None:
        (model / "model.safetensors").unlink()
        if weights == "fifo":
            os.mkfifo(model / "model.safetensors")
        else:
            (model / "model.safetensors").write_bytes(weights)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": str(model), "dataset": str(demo_dir / "data/texts.jsonl")}))
    return model, spec


CONFIGS = {
    "hidden_size 32.5": ({"hidden_size": 32.5}, "hidden_size"),
    "no attention heads": ({"num_attention_heads": 0}, "num_attention_heads"),
    "id2label a list": ({"id2label": ["cat", "dog", "bird"]}, "id2label"),
    "dtype float128": ({"dtype": "float128"}, "float128"),
    "vocab_size -5": ({"vocab_size": -5}, "vocab_size"),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
@pytest.mark.parametrize("command", ["diagnose", "inspect"])
def test_a_malformed_config_is_one_line_of_ours(case, command, demo_dir, tmp_path):
    """In a process of its own: a library's own warning line would reach the real stderr."""
    settings, word = CONFIGS[case]
    model, spec = _model_copy(demo_dir, tmp_path, config=settings)
    proc = run_cli(command, spec if command == "diagnose" else model)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr, str(model), "config.json", word)


def test_the_config_check_refuses_no_default_config_of_transformers():
    """Sizes per stage (Swin's num_heads list), per part (LXMERT's layers), 1200.0: all models'
    own defaults pass the check."""
    import transformers
    from transformers import CONFIG_MAPPING

    from fp16studio.core.hf.config_file import config_problem

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    checked, refused = 0, {}
    try:
        for name in list(CONFIG_MAPPING.keys()):
            try:
                settings = CONFIG_MAPPING[name]().to_dict()
            except Exception:  # noqa: BLE001 - a config class that needs arguments: not ours
                continue
            checked += 1
            if config_problem(settings):
                refused[name] = config_problem(settings)
    finally:
        transformers.logging.set_verbosity(verbosity)
    assert checked > 100 and not refused, refused


def _header(value) -> bytes:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return struct.pack("<Q", len(raw)) + raw


WEIGHTS = {
    "header a list": _header([1, 2]),
    "no dtype": _header({"w": {"shape": [1], "data_offsets": [0, 4]}}) + bytes(4),
    "nested 200,000 deep": _header(b"[" * 200_000 + b"]" * 200_000),
    "a FIFO": "fifo",
}


@pytest.mark.parametrize("case", sorted(WEIGHTS))
@pytest.mark.parametrize("command", ["diagnose", "inspect"])
def test_a_malformed_safetensors_file_is_one_line_never_a_hang(case, command, demo_dir, tmp_path):
    model, spec = _model_copy(demo_dir, tmp_path, weights=WEIGHTS[case])
    proc = run_cli(command, spec if command == "diagnose" else model, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert_one_line(proc.stderr, str(model), *(["not a regular file"] if case == "a FIFO" else []))


def test_inspect_takes_the_path_of_a_config_json_for_its_folder(demo_dir, capsys):
    config = demo_dir / "models/tiny-bert/config.json"
    assert main(["inspect", str(config), "--json"]) == 0
    by_config = json.loads(capsys.readouterr().out)
    assert main(["inspect", str(config.parent), "--json"]) == 0
    by_folder = json.loads(capsys.readouterr().out)
    assert by_config["model"] == str(config)
    assert {**by_config, "model": None} == {**by_folder, "model": None}
    assert by_config["checkpoint_dtypes"] == {"float32": 41}


# -- consent follows the code -------------------------------------------------------------------------
@pytest.fixture
def code_elsewhere(demo_dir, tmp_path, monkeypatch):
    """A received spec whose model folder was trusted with its own code, then its config.json
    pointed at code in another folder (`other--modeling_other.OtherModel`)."""
    import shutil

    from fp16studio.core.spec import trust

    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    model = tmp_path / "received" / "model"
    shutil.copytree(demo_dir / "models/tiny-bert", model)
    (model / "modeling_own.py").write_text("OWN = 1\n")
    spec_path = tmp_path / "received" / "spec.json"
    spec_path.write_text(json.dumps({"model": "model", "dataset": "synthetic",
                                     "task": "sequence-classification", "trust_remote_code": True}))
    from fp16studio.core.spec.documents import load_spec

    trust.require(spec_path, load_spec(spec_path), grant=True)
    other = tmp_path / "other"
    other.mkdir()
    (other / "modeling_other.py").write_text(
        "from transformers import BertForSequenceClassification\n\n\n"
        "class OtherModel(BertForSequenceClassification):\n    pass\n")
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": f"{other}--modeling_other.OtherModel"}
    (model / "config.json").write_text(json.dumps(config))
    return spec_path, other


def test_consent_covers_model_code_in_another_folder_its_auto_map_names(code_elsewhere):
    from fp16studio.core.spec import trust
    from fp16studio.core.spec.documents import load_spec

    spec_path, other = code_elsewhere
    question = trust.consent_needed(spec_path, load_spec(spec_path))
    assert question is not None and str(other) in question
    trust.require(spec_path, load_spec(spec_path), grant=True)
    assert trust.consent_needed(spec_path, load_spec(spec_path)) is None
    code = other / "modeling_other.py"
    code.write_text(code.read_text() + "\nimport os  # changed\n")
    assert trust.consent_needed(spec_path, load_spec(spec_path)) is not None


def test_model_code_changed_after_consent_is_refused_before_it_loads(code_elsewhere):
    from fp16studio.core.common.errors import InputError
    from fp16studio.core.hf.loading import load_config, model_folder
    from fp16studio.core.spec import trust
    from fp16studio.core.spec.documents import load_spec

    spec_path, other = code_elsewhere
    spec = load_spec(spec_path)
    trust.require(spec_path, spec, grant=True)
    code = other / "modeling_other.py"
    code.write_text(code.read_text() + "\nimport os  # swapped after the question\n")
    with pytest.raises(InputError, match="changed since you agreed"):
        load_config(model_folder(spec), spec)


# -- words --------------------------------------------------------------------------------------------
def test_string_labels_are_said_to_be_strings_not_missing(demo_dir, tmp_path, capsys):
    data = tmp_path / "reviews.jsonl"
    data.write_text('{"text": "good film", "label": "positive"}\n'
                    '{"text": "bad film", "label": "negative"}\n')
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": str(demo_dir / "models/tiny-bert"), "dataset": str(data),
                                "with_labels": True}))
    assert main(["diagnose", str(spec)]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, "'label' column", "holds strings", "class ids", "ClassLabel")
    assert "no label column" not in err


def test_training_a_model_whose_parameters_are_all_frozen_is_bad_input():
    import torch

    from fp16studio.core.common.errors import InputError
    from fp16studio.core.run.train_steps import run_train_steps
    from fp16studio.core.spec.value import PipelineSpec

    model = torch.nn.Linear(4, 2).requires_grad_(False)
    spec = PipelineSpec.from_dict({"model": "frozen", "dataset": "synthetic", "with_labels": True,
                                   "train": {"optimizer": "adamw"}})
    with pytest.raises(InputError, match="no trainable parameters"):
        run_train_steps(spec, model, {"input": torch.rand(2, 4)}, torch.device("cpu"), {})
