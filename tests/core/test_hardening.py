"""Hostile and careless input (issue 9): one test per class, parametrised over its instances.

Bad input exits 2 with one line naming the file and what is wrong (never 3, never a traceback);
nothing hangs (every case that could is bounded by a subprocess timeout); no user file is lost.
"""

import io
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from fp16studio.cli import main
from json_schemas import parsed

# A bound for each command run in a child process: a hang fails the test instead of the suite.
CHILD_TIMEOUT_S = 120


def run_cli(*args, env=None, timeout=CHILD_TIMEOUT_S):
    """The command line in a child process (what could hang or exit runs there)."""
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "fp16studio", *map(str, args)],
                          capture_output=True, text=True, env=full_env, timeout=timeout)


def assert_one_line(err: str, *words):
    assert err.startswith("fp16studio: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, err


def spec_file(folder, demo_dir, name="spec.json", **keys):
    data = {"model": str(demo_dir / "models/tiny-resnet"), "dataset": str(demo_dir / "data/images")}
    data.update(keys)
    path = folder / name
    path.write_text(json.dumps(data))
    return path


# -- weights and configs ---------------------------------------------------------------------------
def _evil_pickle():
    import torch

    class Evil:
        def __reduce__(self):
            return (os.getcwd, ())

    buffer = io.BytesIO()
    torch.save({"weight": Evil()}, buffer)
    return buffer.getvalue()


def _safetensors(header) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


WEIGHTS = {
    "truncated safetensors": lambda real: {"model.safetensors": real[: len(real) // 2]},
    "absurd header length": lambda real: {"model.safetensors": struct.pack("<Q", 2**60) + b"{}"},
    "header is a list": lambda real: {"model.safetensors": _safetensors([1, 2])},
    "offsets past the end": lambda real: {"model.safetensors": _safetensors(
        {"w": {"dtype": "F32", "shape": [1000, 1000], "data_offsets": [0, 4_000_000]}})},
    "0-byte weights": lambda real: {"model.safetensors": b""},
    "malicious pickle": lambda real: {"pytorch_model.bin": _evil_pickle()},
    "config is a list": lambda real: {"config.json": b"[1, 2]", "model.safetensors": real},
    "config names a tokenizer": lambda real: {"model.safetensors": real, "config.json": json.dumps(
        {"architectures": ["BertTokenizer"], "model_type": "bert"}).encode()},
    "config nested 100k deep": lambda real: {"model.safetensors": real,
                                             "config.json": b"[" * 100_000 + b"]" * 100_000},
}


@pytest.mark.parametrize("case", sorted(WEIGHTS))
def test_damaged_or_hostile_weights_and_configs_are_bad_input(case, demo_dir, tmp_path, capsys):
    source = demo_dir / "models/tiny-resnet"
    model = tmp_path / "model"
    model.mkdir()
    for path in source.glob("*.json"):
        shutil.copy(path, model)
    for name, content in WEIGHTS[case]((source / "model.safetensors").read_bytes()).items():
        (model / name).write_bytes(content)
    assert main(["diagnose", str(spec_file(tmp_path, demo_dir, model=str(model)))]) == 2
    err = capsys.readouterr().err
    assert_one_line(err, str(model))
    assert "weights_only" not in err  # never the advice to switch the pickle safety off


def test_device_map_naming_an_absent_device_is_bad_input(demo_dir, tmp_path, capsys):
    assert main(["diagnose", str(spec_file(tmp_path, demo_dir, device_map="cuda:7"))]) == 2
    assert_one_line(capsys.readouterr().err, "device_map", "cuda:7")


# -- spec and session files ------------------------------------------------------------------------
SPEC_FILES = {
    "latin-1 spec": ("spec.json", '{"model": "caf\xe9", "dataset": "d"}'.encode("latin-1")),
    "latin-1 session": ("s.fp16studio", b'{"fp16studio_session": 1, "spec": {"model": "\xe9"}}'),
    "JSON nested 100k deep": ("deep.json", b"[" * 100_000 + b"]" * 100_000),
    "TOML nested 100k deep": ("deep.toml", b"a = " + b"[" * 100_000 + b"]" * 100_000),
    "session nested 100k deep": ("deep.fp16studio", b'{"fp16studio_session": 1, "spec": '
                                 + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    "session of an unknown format": ("new.fp16studio", b'{"fp16studio_session": 7, "spec": '
                                     b'{"model": "m", "dataset": "synthetic"}, "x": 1}'),
    "spec that is a list": ("list.json", b"[1, 2, 3]"),
    "spec with a very long model name": ("long.json", json.dumps(
        {"model": "m" * 100_000, "dataset": "synthetic"}).encode()),
    "spec with a NUL in a path": ("nul.json", b'{"model": "a\\u0000b", "dataset": "synthetic"}'),
    "spec with model_dtype null": ("null-dtype.json", b'{"model": "m", "dataset": "synthetic", '
                                   b'"model_dtype": null}'),
    "spec whose applied fix has edits 5": ("edits.json", b'{"model": "m", "dataset": "synthetic", '
                                           b'"applied_fixes": [{"id": "a", "title": "b", "edits": 5}]}'),
}


@pytest.mark.parametrize("case", sorted(SPEC_FILES))
def test_unreadable_spec_and_session_files_are_bad_input(case, tmp_path, capsys):
    name, content = SPEC_FILES[case]
    path = tmp_path / name
    path.write_bytes(content)
    assert main(["diagnose", str(path)]) == 2
    assert_one_line(capsys.readouterr().err, *(["format 7"] if "format" in case else []))


@pytest.mark.parametrize("spec", ["/dev/zero", "/dev/null", "/", "x" * 5000 + ".json"])
def test_special_files_and_long_names_as_spec_are_bad_input(spec, capsys):
    assert main(["diagnose", spec]) == 2
    assert_one_line(capsys.readouterr().err)


# -- datasets ---------------------------------------------------------------------------------------
def _dataset_script(folder):
    folder.mkdir()
    (folder / "myset.py").write_text("import datasets\nclass MySet(datasets.GeneratorBasedBuilder):\n"
                                     "    pass\n")
    return folder


def _audio_folder(folder):
    folder.mkdir()
    for i in range(2):
        (folder / f"{i}.mp3").write_bytes(b"ID3" + bytes(200))
    return folder


DATASETS = {
    "empty CSV": lambda t: _write(t / "empty.csv", b""),
    "latin-1 CSV": lambda t: _write(t / "latin.csv", "text,label\ncaf\xe9,1\n".encode("latin-1")),
    "broken JSONL": lambda t: _write(t / "broken.jsonl", b'{"text": "a", "label": 1}\n{"text": \n'),
    "scalar JSON": lambda t: _write(t / "scalar.json", b"42"),
    "dataset script": lambda t: _dataset_script(t / "scripted"),
    "audio folder without a decoder": lambda t: _audio_folder(t / "audio"),
    "unsupported file type": lambda t: _write(t / "data.xlsx", b"PK"),
}


def _write(path, content):
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", sorted(DATASETS))
def test_datasets_that_cannot_be_parsed_are_bad_input_or_a_finding(case, demo_dir, tmp_path,
                                                                   capsys):
    dataset = DATASETS[case](tmp_path)
    spec = spec_file(tmp_path, demo_dir, model=str(demo_dir / "models/tiny-bert"),
                     dataset=str(dataset))
    code = main(["diagnose", str(spec)])
    err = capsys.readouterr().err
    # The audio folder is read, and fails to decode in the pipeline: that is the diagnosis (1).
    assert code == 2 or (code == 1 and not err), err
    if code == 2:
        assert_one_line(err, dataset.name)
        assert "DatasetGenerationError" not in err  # the cause, not the wrapper's name


@pytest.mark.parametrize("case, cause", [("broken JSONL", "JSON parse error"),
                                         ("latin-1 CSV", "UnicodeDecodeError")])
def test_an_unparsable_dataset_is_one_line_with_its_cause(case, cause, demo_dir, tmp_path):
    """In a process of its own: datasets logs its own line to the real stderr first."""
    dataset = DATASETS[case](tmp_path)
    spec = spec_file(tmp_path, demo_dir, model=str(demo_dir / "models/tiny-bert"), dataset=str(dataset))
    proc = run_cli("diagnose", spec)
    assert proc.returncode == 2
    assert_one_line(proc.stderr, dataset.name, cause)


def test_synthetic_samples_are_bounded(demo_dir, tmp_path, capsys):
    spec = spec_file(tmp_path, demo_dir, dataset="synthetic", samples=10**9)
    assert main(["diagnose", str(spec)]) == 2
    assert_one_line(capsys.readouterr().err, "samples")


# -- hangs ------------------------------------------------------------------------------------------
FIFOS = ("spec", "dataset", "preprocess")


@pytest.mark.parametrize("role", FIFOS)
def test_a_fifo_is_refused_never_read(role, demo_dir, tmp_path):
    fifo = tmp_path / ("pipe.py" if role == "preprocess" else "pipe.json")
    os.mkfifo(fifo)
    if role == "spec":
        spec = fifo
    elif role == "dataset":
        spec = spec_file(tmp_path, demo_dir, dataset=str(fifo))
    else:
        spec = spec_file(tmp_path, demo_dir, preprocess=f"{fifo}:fn")
    proc = run_cli("diagnose", spec, *(["--trust"] if role == "preprocess" else []))
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "not a regular file")


@pytest.mark.parametrize("value", ["nan", "-1", "0", "1e300", "inf"])
def test_a_timeout_that_is_no_number_of_seconds_is_bad_input_or_no_limit(value, capsys):
    """nan, 0 and less are bad input; inf and what no timer can hold (1e300) mean no limit."""
    code = main(["diagnose", "/nonexistent/spec.json", "--timeout", value])
    err = capsys.readouterr().err
    assert code == 2
    if value in ("nan", "-1", "0"):
        assert_one_line(err, "--timeout")
    else:  # no limit: the run goes on, to the missing spec
        assert_one_line(err, "spec.json")


def test_timeout_stops_a_preprocess_that_never_returns(demo_dir, tmp_path):
    (tmp_path / "pre.py").write_text("import time\n\n\ndef fn(example):\n    time.sleep(10**6)\n")
    spec = spec_file(tmp_path, demo_dir, preprocess="pre.py:fn")
    proc = run_cli("diagnose", spec, "--trust", "--timeout", "5")
    assert proc.returncode == 2
    assert_one_line(proc.stderr, "--timeout 5")


class SilentHub:
    """A local server that accepts connections and never answers (or, `partly`, answers the
    health check and then goes silent): the Hub behind a broken proxy."""

    def __init__(self, partly=False):
        self.partly = partly
        self.server = socket.create_server(("127.0.0.1", 0))
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def _accept(self):
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.held.append(connection)
            if self.partly:
                threading.Thread(target=self._answer_health, args=(connection,), daemon=True).start()

    def _answer_health(self, connection):
        try:
            if b"/api/health" in connection.recv(4096):
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
                                   b"Connection: close\r\n\r\n")
        except OSError:
            pass

    def close(self):
        self.server.close()
        for connection in self.held:
            connection.close()


@pytest.mark.parametrize("partly", [False, True], ids=["silent", "silent-after-probe"])
def test_a_hub_that_never_answers_is_an_error_not_a_hang(partly, demo_dir, tmp_path):
    hub = SilentHub(partly)
    env = {"HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "", "HF_DATASETS_OFFLINE": "",
           "TRANSFORMERS_OFFLINE": "", "HF_HOME": str(tmp_path / "hf")}
    model_spec = spec_file(tmp_path, demo_dir, "model.json", model="org/model", dataset="synthetic")
    data_spec = spec_file(tmp_path, demo_dir, "data.json", dataset="org/data")
    commands = [("diagnose", model_spec), ("diagnose", data_spec), ("inspect", "org/model")]
    try:
        with ThreadPoolExecutor(len(commands)) as pool:
            procs = list(pool.map(lambda args: run_cli(*args, env=env), commands))
    finally:
        hub.close()
    for proc in procs:
        assert proc.returncode == 2, proc.stderr
        assert_one_line(proc.stderr, "did not answer", "HF_HUB_OFFLINE")


# -- code that exits or prints -------------------------------------------------------------------------
def test_a_preprocess_calling_sys_exit_is_never_a_silent_pass(demo_dir, tmp_path, capsys):
    for code in (0, 3):
        (tmp_path / "pre.py").write_text(f"import sys\n\n\ndef fn(example):\n    sys.exit({code})\n")
        spec = spec_file(tmp_path, demo_dir, preprocess="pre.py:fn")
        assert main(["diagnose", str(spec), "--trust", "--json"]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert f"sys.exit({code})" in doc["error"]["message"]


def test_a_preprocess_that_prints_leaves_json_intact(demo_dir, tmp_path):
    (tmp_path / "pre.py").write_text("import os\n\n\ndef fn(example):\n    print('hello')\n"
                                     "    os.write(1, b'raw\\n')\n    return example\n")
    proc = run_cli("diagnose", spec_file(tmp_path, demo_dir, preprocess="pre.py:fn"),
                   "--trust", "--json")
    assert proc.returncode == 0, proc.stderr
    assert parsed("diagnose", proc.stdout)["ok"]
    assert "hello" in proc.stderr and "raw" in proc.stderr


# -- files lost ------------------------------------------------------------------------------------
@pytest.fixture
def project(demo_dir, tmp_path):
    (tmp_path / "pre.py").write_text("def fn(example):\n    return example\n")
    return spec_file(tmp_path, demo_dir, preprocess="pre.py:fn")


INPUT, OTHER_KIND = "is an input of this command", "--force"
OVERWRITES = {
    "export onto its spec": (lambda p: ["export", p, "-o", p], INPUT),
    "report onto its spec": (lambda p: ["report", p, "-o", p, "--trust"], INPUT),
    "fix onto its spec": (lambda p: ["fix", p, "-o", p, "--trust"], INPUT),
    "export onto the preprocess": (lambda p: ["export", p, "-o", p.parent / "pre.py"], INPUT),
    "export into the dataset": (lambda p: ["export", p, "-o", p.parent / "data" / "x.py"], INPUT),
    "export onto another spec": (lambda p: ["export", p, "-o", p.parent / "other.json"],
                                 OTHER_KIND),
    "report onto a user's script": (lambda p: ["report", p, "-o", p.parent / "mine.py", "--trust"],
                                    OTHER_KIND),
}


@pytest.mark.parametrize("case", sorted(OVERWRITES))
def test_outputs_never_replace_inputs_or_other_files(case, project, demo_dir, tmp_path, capsys):
    (tmp_path / "other.json").write_text('{"model": "m", "dataset": "d"}')
    (tmp_path / "mine.py").write_text("print('my own code')\n")
    shutil.copytree(demo_dir / "data/images", tmp_path / "data")
    project.write_text(project.read_text().replace(str(demo_dir / "data/images"),
                                                   str(tmp_path / "data")))
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    command, reason = OVERWRITES[case]
    assert main([str(a) for a in command(project)]) == 2
    assert_one_line(capsys.readouterr().err, reason)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_the_config_folders_files_are_never_outputs(project, tmp_path, capsys):
    """`fix -o trusted.json --force` would have the trust store overwrite the fixed spec."""
    from fp16studio.core.common.config_folder import config_dir
    from fp16studio.core.spec import trust

    assert main(["diagnose", str(project), "--trust"]) in (0, 1)   # a consent in the store
    store = config_dir() / trust.STORE
    before = store.read_bytes()
    assert main(["fix", str(project), "-o", str(store), "--force", "--trust"]) == 2
    assert_one_line(capsys.readouterr().err, "config folder")
    assert store.read_bytes() == before


@pytest.mark.parametrize("store", ["fifo", "/dev/zero", "nested 100k deep"])
def test_a_strange_trust_store_is_read_as_empty_never_blocks(store, project, tmp_path):
    """trusted.json and recent.json are read like the user's files: a FIFO, a link to /dev/zero
    or deep nesting never hangs nor crashes a run; the consent is asked for (or given) again."""
    config = tmp_path / "config"
    config.mkdir()
    for name in ("trusted.json", "recent.json"):
        if store == "fifo":
            os.mkfifo(config / name)
        elif store == "/dev/zero":
            (config / name).symlink_to("/dev/zero")
        else:
            (config / name).write_text("[" * 100_000 + "]" * 100_000)
    proc = run_cli("diagnose", project, "--trust", env={"FP16STUDIO_CONFIG_DIR": str(config)}, timeout=180)
    assert proc.returncode in (0, 1), proc.stderr


def test_concurrent_consents_are_all_kept(tmp_path):
    """Processes recording consent at once (several `--trust` runs) lose none of them."""
    from fp16studio.core.spec import trust

    code = ("import sys; from fp16studio.core import open_spec; from fp16studio.core.spec import trust;"
            "p = sys.argv[1]; trust.trust(p, open_spec(p))")
    specs = []
    for i in range(8):
        (tmp_path / f"pre{i}.py").write_text(f"def fn(example):\n    return example  # {i}\n")
        spec = tmp_path / f"s{i}.json"
        spec.write_text(json.dumps({"model": "m", "dataset": "synthetic", "preprocess": f"pre{i}.py:fn"}))
        specs.append(spec)
    procs = [subprocess.Popen([sys.executable, "-c", code, str(s)]) for s in specs]
    assert all(p.wait(timeout=CHILD_TIMEOUT_S) == 0 for p in procs)
    from fp16studio.core import open_spec

    assert all(trust.consent_needed(s, open_spec(s)) is None for s in specs)


def test_force_replaces_another_kind_and_keeps_a_backup(project, tmp_path, capsys):
    other = tmp_path / "other.json"
    other.write_text('{"model": "m", "dataset": "d"}')
    assert main(["export", str(project), "-o", str(other), "--force"]) == 0
    assert other.with_name("other.json.bak").read_text() == '{"model": "m", "dataset": "d"}'
    # Now a script, its own kind; but the user's file kept as other.json.bak is never replaced.
    assert main(["export", str(project), "-o", str(other)]) == 2
    assert other.with_name("other.json.bak").read_text() == '{"model": "m", "dataset": "d"}'


@pytest.mark.parametrize("output", ["", "/", "{tmp}", "{tmp}/no/such/folder/x.py",
                                    "{tmp}/readonly/x.py", "{tmp}/pipe.py"])
def test_output_paths_that_cannot_be_written_are_bad_input(output, project, tmp_path, capsys):
    readonly = tmp_path / "readonly"
    readonly.mkdir()
    os.mkfifo(tmp_path / "pipe.py")  # never a device: a bug here must not replace /dev/*
    readonly.chmod(0o500)
    try:
        code = main(["export", str(project), "-o", output.format(tmp=tmp_path)])
    finally:
        readonly.chmod(0o700)
    if output.endswith("readonly/x.py") and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    assert code == 2
    assert_one_line(capsys.readouterr().err)
    assert not list(tmp_path.glob("**/.*.tmp"))


def test_a_full_disk_keeps_the_old_output(project, tmp_path, monkeypatch, capsys):
    script = tmp_path / "script.py"
    assert main(["export", str(project), "-o", str(script)]) == 0
    before = script.read_text()
    real_replace = type(script).replace

    def disk_full(self, target):  # the temporary file was written; the rename onto it fails
        if target == script:
            raise OSError(28, "No space left on device")
        return real_replace(self, target)

    monkeypatch.setattr(type(script), "replace", disk_full)
    assert main(["export", str(project), "-o", str(script)]) == 2
    monkeypatch.setattr(type(script), "replace", real_replace)
    assert_one_line(capsys.readouterr().err, "No space left")
    assert script.read_text() == before and not list(tmp_path.glob(".*.tmp"))


DEMO_DIRS = {
    "DIR is a file": lambda d: (d.write_text("mine"), d)[1],
    "DIR holds the user's preprocess.py": lambda d: _mkdir_with(d, "preprocess.py"),
    "DIR holds a spec of the same name": lambda d: _mkdir_with(d, "healthy.json"),
    "DIR holds a data folder": lambda d: _mkdir_with(d, "data/mine.csv"),
}


def _mkdir_with(folder, name):
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("the user's own")
    return folder


@pytest.mark.parametrize("case", sorted(DEMO_DIRS))
def test_demo_never_overwrites_the_users_files(case, tmp_path, capsys):
    target = DEMO_DIRS[case](tmp_path / "demo")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert main(["demo", str(target)]) == 2
    assert_one_line(capsys.readouterr().err, "demo")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_damaged_demo_cache_is_rebuilt_not_downloaded(tmp_path, monkeypatch, capsys):
    from fp16studio.core.demo.pipelines import ensure_demo_files

    monkeypatch.setenv("FP16STUDIO_CACHE", str(tmp_path / "cache"))
    root = ensure_demo_files()
    shutil.rmtree(root / "models" / "tiny-resnet")
    assert main(["diagnose", "demo:healthy"]) == 0
    assert "hf download" not in capsys.readouterr().err


@pytest.fixture
def int_forward_model(demo_dir, tmp_path):
    """A model of the user's own (remote code) whose forward returns an int, not a tensor."""
    model = tmp_path / "model"
    shutil.copytree(demo_dir / "models/tiny-bert", model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_int.IntModel"}
    (model / "config.json").write_text(json.dumps(config))
    (model / "modeling_int.py").write_text(
        "from transformers import BertForSequenceClassification\n\n\n"
        "class IntModel(BertForSequenceClassification):\n"
        "    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None):\n"
        "        return 3\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "model", "dataset": "synthetic", "trust_remote_code": True,
                                "task": "sequence-classification"}))
    return spec


def test_a_forward_that_returns_no_tensor_is_said_so_never_a_bug(int_forward_model, capsys):
    said = "the model returned no tensor (its forward returned int)"
    assert main(["diagnose", str(int_forward_model), "--trust", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["message"] == said
    assert main(["drift", str(int_forward_model), "--trust", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["message"] == said
    assert main(["bench", str(int_forward_model), "--trust", "--json", "--variants", "float32",
                 "--warmup", "0", "--min-iterations", "1", "--min-seconds", "0", "--min-rounds", "1"]) == 0
    [variant] = json.loads(capsys.readouterr().out)["variants"]
    assert not variant["ok"] and variant["error"] == said
