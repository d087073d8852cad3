"""`fp16studio trace`: real scripts, each run unmodified in its own child process."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fp16studio
from fp16studio.core.common.errors import Cancelled, CancelToken, InputError
from fp16studio.core.script.trace import trace_script
from json_schemas import parsed

SCRIPTS = Path(__file__).parent.parent / "scripts"


def codes(result):
    return [(f.code, f.severity) for f in result.findings]


def line_of(script: Path, text: str) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("name", ["map-cast", "pil-preprocess"])
def test_image_demo_recovers_a_spec_whose_first_fix_runs_clean(demo_dir, name):
    from fp16studio.core import apply_fix, diagnose

    result = trace_script(f"demo:{name}")
    script = Path(result.script)
    call = line_of(script, "output = model(input_tensor)")
    assert result.error.module == "resnet.embedder.embedder.convolution"
    assert result.error.source == {"file": str(script), "line": call}
    mismatch = result.findings[0]
    assert (mismatch.code, mismatch.location) == ("dtype-mismatch",
                                                  "resnet.embedder.embedder.convolution")
    assert mismatch.source["line"] == call
    assert result.tree is not None and result.tree.find("resnet.embedder.embedder.convolution")
    spec = result.recovered_spec
    assert spec is not None and spec.model_dtype == "float16" and spec.batch_size == 4
    if name == "map-cast":
        lost = next(f for f in result.findings if f.code == "map-cast-lost")
        assert lost.source["line"] == line_of(script, "dataset.map(prepare_batch")
        assert spec.map_dtype == "float16"
    else:
        assert spec.preprocess.endswith("preprocess.py:custom_preprocessing")
    rerun = diagnose(spec)
    assert not rerun.ok and rerun.findings[0].code == "dtype-mismatch"
    assert diagnose(apply_fix(spec, rerun.findings[0].fixes[0])).ok


def test_blind_half_demo_names_the_cast_line_and_says_the_fix_in_code(demo_dir):
    result = trace_script("demo:blind-half")
    script = Path(result.script)
    assert result.error.module == "bert.embeddings.word_embeddings"
    cast = result.findings[0]
    assert (cast.code, cast.severity, cast.location) == ("integer-cast", "error", "input_ids")
    assert cast.source["line"] == line_of(script, "tensor.half() for name")
    assert result.recovered_spec is None and "load_dataset" in result.notes[0]
    doc = result.to_json()
    assert doc["spec"] is None
    fix = doc["findings"][0]["fixes"][0]
    assert fix["id"] == "cast-floating-only" and "is_floating_point()" in fix["code"]


def test_text_pipeline_with_a_custom_collator(demo_dir):
    script = SCRIPTS / "text_collator.py"
    lines = []
    result = trace_script(script, [demo_dir], output=lambda stream, line: lines.append(
        (stream, line)))
    assert ("stdout", "batches: 2") in lines
    assert result.models[0]["class"] == "BertForSequenceClassification"
    cast = result.findings[0]
    assert (cast.code, cast.severity) == ("integer-cast", "error")
    assert cast.source == {"file": str(script), "line": line_of(script, "value.to(torch.float16)")}
    assert result.recovered_spec is None and "collate" in result.notes[0]


def test_generate_is_traced_once_and_runs_clean(tmp_path):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=32, n_embd=16, n_layer=2,
                               n_head=2)).save_pretrained(tmp_path / "gpt2")
    lines = []
    result = trace_script(SCRIPTS / "generate.py", [tmp_path / "gpt2"],
                          output=lambda stream, line: lines.append(line))
    assert result.ok and result.error is None, result.error
    assert "generated 4 tokens" in lines
    (model,) = result.models
    assert model["class"] == "GPT2LMHeadModel" and model["calls"] == 4
    # Only the first pass was traced: one call of the model itself among the records.
    activations = result.tree.find("activations")
    assert sum(1 for node in activations.children if node.note == "model") == 1
    assert result.output.name == "logits"


def test_a_model_class_of_the_scripts_own():
    script = SCRIPTS / "own_model.py"
    result = trace_script(script)
    assert [m["class"] for m in result.models] == ["TinyNet"]  # the loss is not a model
    mismatch = result.findings[0]
    assert (mismatch.code, mismatch.location) == ("dtype-mismatch", "encoder.0")
    # The failing call inside the script's own forward, not the line that called the model.
    assert mismatch.source["line"] == line_of(script, "hidden = self.encoder(features)")
    assert result.recovered_spec is None and "from_pretrained" in result.notes[0]


def test_a_script_that_fails_before_any_model_runs():
    script = SCRIPTS / "fails_early.py"
    result = trace_script(script)
    assert not result.ok and result.models == []
    assert result.error.type == "IndexError" and result.error.stage == "script"
    assert result.error.source["line"] == line_of(script, "first = rows[0]")


def test_sys_exit_in_the_script():
    failed = trace_script(SCRIPTS / "exits.py")
    assert not failed.ok and failed.error.type == "SystemExit"
    assert "sys.exit(3)" in failed.error.message
    assert trace_script(SCRIPTS / "exits.py", ["0"]).ok


def test_a_script_that_hangs_is_stopped_and_what_ran_is_diagnosed():
    result = trace_script(SCRIPTS / "hangs.py", timeout=20)
    assert result.error.type == "Timeout" and "20 s" in result.error.message
    assert result.models[0]["class"] == "Linear" and not result.ok


def test_cancel_stops_the_script():
    token = CancelToken()
    token.cancel()
    with pytest.raises(Cancelled):
        trace_script(SCRIPTS / "hangs.py", cancel=token, timeout=60)


def test_a_script_that_needs_arguments():
    missing = trace_script(SCRIPTS / "needs_args.py")
    assert not missing.ok and "after --" in missing.error.message
    assert trace_script(SCRIPTS / "needs_args.py", ["--width", "3"]).ok


def test_a_script_that_never_calls_a_model():
    result = trace_script(SCRIPTS / "no_model.py")
    assert result.ok and result.models == [] and "no model ran" in result.notes[0]


def test_cuda_without_cuda_is_device_unavailable_at_the_line():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    script = SCRIPTS / "cuda_only.py"
    result = trace_script(script)
    (finding,) = result.findings
    assert (finding.code, finding.severity) == ("device-unavailable", "error")
    assert finding.source["line"] == line_of(script, "net = net.cuda()")


def test_bad_input():
    with pytest.raises(InputError, match="no such script"):
        trace_script(SCRIPTS / "missing.py")
    with pytest.raises(InputError, match="timeout"):
        trace_script(SCRIPTS / "no_model.py", timeout=0)
    with pytest.raises(InputError, match="no trace demo"):
        trace_script("demo:nope")


def test_cli_json_keeps_the_scripts_output_out():
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "fp16studio", "trace", *map(str, args)],
                              capture_output=True, text=True, timeout=300)

    clean = cli(SCRIPTS / "no_model.py", "--json")
    assert clean.returncode == 0, clean.stderr
    assert parsed("trace", clean.stdout)["models"] == []   # stdout is the document alone
    assert "sum 6" in clean.stderr                      # the script's print went to stderr
    failed = cli(SCRIPTS / "own_model.py", "--json")
    assert failed.returncode == 1, failed.stderr
    doc = parsed("trace", failed.stdout)
    assert set(doc) >= {"ok", "spec", "device", "findings", "error", "inventory", "script",
                        "models"}
    assert doc["spec"] is None and doc["findings"][0]["source"]["line"] == line_of(
        SCRIPTS / "own_model.py", "hidden = self.encoder(features)")
    assert failed.stderr.startswith("Traceback") and "own_model.py" in failed.stderr.splitlines()[1]
    ours = str(Path(fp16studio.__file__).parent)
    assert ours not in failed.stderr   # as python would print it: no frames of ours
    missing = cli("nope.py")
    assert missing.returncode == 2 and missing.stderr.strip() == "fp16studio: no such script: nope.py"


def test_cuda_autocast_without_cuda_is_recovered_as_written(demo_dir):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the autocast works")
    script = SCRIPTS / "amp_autocast.py"
    result = trace_script(script, [demo_dir])
    inactive = next(f for f in result.findings if f.code == "autocast-inactive")
    assert inactive.source["line"] == line_of(script, "with torch.cuda.amp.autocast():")
    spec = result.recovered_spec
    assert spec is not None and (spec.autocast, spec.autocast_device) == ("float16", "cuda")
    assert spec.with_labels and spec.dataset.endswith("texts.jsonl") and spec.model_dtype == "auto"


def test_what_is_piped_in_reaches_the_script(tmp_path):
    script = tmp_path / "ask.py"
    script.write_text('name = input()\nprint("got", name)\n')
    done = subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(script)],
                          input="hello\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "got hello" in done.stdout


def test_the_scripts_folder_does_not_shadow_what_fp16studio_imports(tmp_path):
    # A cuda.py beside the script: torch's own `from cuda.bindings import ...` must not find it.
    (tmp_path / "cuda.py").write_text('raise SystemExit("shadowed")\n')
    (tmp_path / "hello.py").write_text('print("hello")\n')
    lines = []
    result = trace_script(tmp_path / "hello.py", output=lambda stream, line: lines.append(line))
    assert result.ok and "hello" in lines and "shadowed" not in lines


def test_a_timeout_during_fp16studios_own_start_shows_none_of_its_internals(tmp_path):
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(60)\n")
    lines = []
    result = trace_script(tmp_path / "sleep.py", timeout=0.3,
                          output=lambda stream, line: lines.append(line))
    assert not result.ok and result.error.type in ("Timeout", "KeyboardInterrupt")
    assert not any("fp16studio" in line for line in lines)


def test_a_script_that_ends_its_own_process_is_said_so_without_a_device(tmp_path):
    script = tmp_path / "quits.py"
    script.write_text("import os\nprint('bye', flush=True)\nos._exit(0)\n")
    run = subprocess.run([sys.executable, "-m", "fp16studio", "trace", str(script)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stderr
    assert "quits.py: problems found" in run.stdout and " on unknown" not in run.stdout
    assert "ended its process (status 0) before fp16studio could collect" in run.stdout


def test_a_traceback_keeps_our_frames_only_where_the_exception_was_raised():
    import traceback

    from fp16studio.core.common.precision import OUR_FOLDER
    from fp16studio.core.script import runner as script_runner

    ours = OUR_FOLDER + "core/run/module_hooks.py"
    frames = [traceback.FrameSummary(name, 1, "f") for name in
              ("/home/u/script.py", ours, "/lib/torch/module.py", ours)]
    kept = [f.filename for f in script_runner._without_our_wrappers(frames)]
    assert kept == ["/home/u/script.py", "/lib/torch/module.py", ours]  # a bug of ours shows


# -- how the child starts: the entry the frozen program understands, --python, a failed start --

def write_program(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def run_entry(tmp_path, script: Path, *args, prelude: str = "", env=None):
    """`python -m fp16studio RUNNER_ARG PIPE SCRIPT ARGS` as trace starts it: what the script
    printed, and what the runner sent over its pipe (frames, in order)."""
    import threading

    from fp16studio.core.common.frames import pipe_to_child
    from fp16studio.core.common.frames import read_frame
    from fp16studio.core.script.entry import RUNNER_ARG
    from fp16studio.core.script.trace import ScriptTrace

    read_fd, write_fd, pipe, passed = pipe_to_child()
    command = [sys.executable, "-m", "fp16studio", RUNNER_ARG, pipe, str(script), *args]
    if prelude:   # the same entry, run as fp16studio/__main__.py with the process set up first
        command = [sys.executable, "-c", prelude + "\nimport runpy\n"
                   "runpy.run_module('fp16studio', run_name='__main__', alter_sys=True)\n",
                   *command[3:]]
    reports = []

    def read():
        with os.fdopen(read_fd, "rb") as stream:
            while True:
                try:
                    report = read_frame(stream)
                    if "result" in report:
                        report["result"] = ScriptTrace.from_json(report["result"])
                    reports.append(report)
                except EOFError:
                    return

    reader = threading.Thread(target=read)
    reader.start()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env=env, **passed)
    finally:
        os.close(write_fd)
        reader.join(timeout=60)
    return done, reports


def test_the_runner_entry_is_fp16studios_own_with_a_reserved_first_argument(tmp_path,
                                                                           monkeypatch):
    from fp16studio.core.script import entry

    script = tmp_path / "args.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:])\nprint('first', sys.path[0])\n")
    done, reports = run_entry(tmp_path, script, "--json", "x")
    assert done.returncode == 0, done.stderr
    # The script's own arguments, even ones the command line knows, are the script's.
    assert "argv ['--json', 'x']" in done.stdout
    assert f"first {tmp_path}" in done.stdout
    # Over its pipe: that it started, then the final result, as typed frames (no pickle).
    assert reports[0] == {"started": True}
    assert reports[-1]["final"] and reports[-1]["result"].ok
    # What trace starts: the same entry from source, the program itself when frozen.
    assert entry.runner_command() == [sys.executable, "-c", entry.BOOT, str(entry.package_folder()),
                                      entry.RUNNER_ARG]
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert entry.runner_command() == [sys.executable, entry.RUNNER_ARG]
    # Nothing the command line takes: a user who types it gets a plain refusal.
    refused = subprocess.run([sys.executable, "-m", "fp16studio", "trace", entry.RUNNER_ARG],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2


def test_the_frozen_programs_entry_from_source(tmp_path):
    # As PyInstaller starts it: sys.frozen, the bundle's standard library first on sys.path
    # (kept), its folder first on LD_LIBRARY_PATH (the script's own child processes get the
    # user's value back), PYTHONUNBUFFERED not read.
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    prelude = (f"import sys\nsys.frozen = True\nsys._MEIPASS = {str(bundle)!r}\n"
               f"sys.path.insert(0, {str(bundle / 'base_library.zip')!r})\n")
    script = tmp_path / "frozen.py"
    script.write_text("import os, sys\nprint('first', sys.path[:2])\n"
                      "print('library', os.environ.get('LD_LIBRARY_PATH'))\n")
    env = dict(os.environ, LD_LIBRARY_PATH=f"{bundle}:/user/lib", LD_LIBRARY_PATH_ORIG="/user/lib")
    env.pop("PYTHONUNBUFFERED", None)
    done, reports = run_entry(tmp_path, script, prelude=prelude, env=env)
    assert done.returncode == 0, done.stderr
    assert f"first [{str(tmp_path)!r}, {str(bundle / 'base_library.zip')!r}]" in done.stdout
    assert "library /user/lib" in done.stdout
    assert reports[0] == {"started": True} and reports[-1]["final"]


def test_output_comes_line_by_line_even_where_pythonunbuffered_is_not_read(tmp_path):
    # The frozen program does not read PYTHONUNBUFFERED; `python -E` does not either. The script
    # waits for its first line to have arrived here before it prints the second.
    flag = tmp_path / "flag"
    script = tmp_path / "talks.py"
    script.write_text(textwrap.dedent(f"""
        import os, time
        print("first")
        deadline = time.monotonic() + 30
        while not os.path.exists({str(flag)!r}) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("second" if os.path.exists({str(flag)!r}) else "nobody read the first line")
    """))
    isolated = write_program(tmp_path / "python-E", f'exec "{sys.executable}" -E "$@"\n')
    lines = []

    def output(stream, line):
        lines.append(line)
        if line == "first":
            flag.touch()

    result = trace_script(script, python=str(isolated), output=output)
    assert result.ok, result.error
    assert lines == ["first", "second"]


def test_python_option_runs_the_script_under_that_interpreter(tmp_path):
    script = tmp_path / "which.py"
    script.write_text("import os, sys, fp16studio\nprint('through', os.environ.get('MY_PYTHON'))\n"
                      "print('package', fp16studio.__file__)\nprint('argv', sys.argv[1:])\n")
    # "Your own Python": the same interpreter, behind a wrapper that says it was used.
    wrapper = write_program(tmp_path / "my python",
                            f'MY_PYTHON=yes exec "{sys.executable}" "$@"\n')
    lines = []
    result = trace_script(script, python=str(wrapper), output=lambda stream, line: lines.append(line))
    assert result.ok, result.error
    assert "through yes" in lines
    # fp16studio from this installation, whatever the interpreter has of its own.
    assert f"package {Path(fp16studio.__file__).resolve()}" in lines
    run = subprocess.run([sys.executable, "-m", "fp16studio", "trace", "--python", str(wrapper),
                          str(script), "--json", "--", "--width", "3"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert parsed("trace", run.stdout)["args"] == ["--width", "3"]
    assert "through yes" in run.stderr and "argv ['--width', '3']" in run.stderr


@pytest.mark.parametrize("python, said", [
    ("/no/such/python", "--python /no/such/python: no such interpreter"),
    ("not-a-program", "not an executable program"),
    ("without-torch", "cannot run the tracer under it: it has no torch, transformers, datasets"),
])
def test_a_bad_python_is_bad_input_in_one_line(tmp_path, python, said):
    if python == "not-a-program":
        (tmp_path / python).write_text("data\n")
        python = str(tmp_path / python)
    elif python == "without-torch":   # no site-packages: a Python without the libraries
        python = str(write_program(tmp_path / python, f'exec "{sys.executable}" -S "$@"\n'))
    run = subprocess.run([sys.executable, "-m", "fp16studio", "trace", "--python", python,
                          str(SCRIPTS / "no_model.py")], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("fp16studio: --python ")
    assert said in run.stderr and run.stdout == ""


def test_a_runner_that_never_starts_is_said_so_never_blamed_on_the_script(tmp_path,
                                                                          monkeypatch):
    from fp16studio.core.script import trace as trace_module

    # Answers the check like a good interpreter, then ends before importing anything.
    broken = write_program(tmp_path / "broken-python", textwrap.dedent(f"""\
        case "$*" in *--check) exec "{sys.executable}" "$@";; esac
        echo "Fatal Python error: init_fs_encoding" >&2
        exit 1
        """))
    script = SCRIPTS / "no_model.py"
    run = subprocess.run([sys.executable, "-m", "fp16studio", "trace", "--python", str(broken),
                          str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and run.stdout == ""
    assert ("the tracer did not start under it (its process ended with status 1: Fatal Python "
            "error: init_fs_encoding); no_model.py did not run") in run.stderr
    assert "the script ended its process" not in run.stderr
    # fp16studio's own child failing to start is fp16studio's problem (exit 3 on the command
    # line), never the script's: what it printed is not the script's output either.
    monkeypatch.setattr(trace_module, "runner_command", lambda python=None: [str(broken), "-c"])
    lines = []
    with pytest.raises(trace_module.TracerNotStarted, match="not of the script") as failed:
        trace_script(script, output=lambda stream, line: lines.append(line))
    assert "status 1: Fatal Python error" in str(failed.value) and lines == []


def test_the_frozen_program_says_to_trace_under_your_own_python(tmp_path, monkeypatch):
    from fp16studio.core.script import trace as trace_module

    script = tmp_path / "needs_yours.py"
    script.write_text("import a_package_only_you_have\n")
    plain = trace_script(script)
    assert plain.error.type == "ModuleNotFoundError" and "--python" not in plain.error.message
    monkeypatch.setattr(trace_module, "frozen", lambda: True)   # ran in the bundled Python
    bundled = trace_script(script)
    assert bundled.error.message.startswith("No module named 'a_package_only_you_have' (")
    assert "fp16studio trace --python /path/to/python SCRIPT" in bundled.error.message
    assert "--python" not in trace_script(script, python=sys.executable).error.message


def test_a_reader_that_goes_away_ends_the_trace_with_141_silently(tmp_path):
    # `fp16studio trace SCRIPT | head -1`: the script's lines meet a closed pipe.
    script = tmp_path / "chatty.py"
    script.write_text("import time\nprint('first', flush=True)\ntime.sleep(1)\n"
                      "for i in range(2000):\n    print('line', i)\n")
    child = subprocess.Popen([sys.executable, "-m", "fp16studio", "trace", str(script)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "first\n"
    child.stdout.close()
    assert child.wait(timeout=300) == 141
    assert child.stderr.read() == ""


def test_a_reader_gone_before_the_json_document_is_141_too(tmp_path):
    # Without PYTHONUNBUFFERED (the frozen program never reads it) stdout is block-buffered:
    # the document meets the closed pipe when it is flushed, which must not wait for the exit.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    read, write = os.pipe()
    os.close(read)                           # `| head -0`: gone before anything was written
    with os.fdopen(write, "w") as closed:
        child = subprocess.run([sys.executable, "-m", "fp16studio", "trace", "--json",
                                str(SCRIPTS / "no_model.py")], stdout=closed,
                               stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert child.returncode == 141
    assert child.stderr.strip() == "sum 6"    # the script's line; nothing of ours
