"""Hardening, round 5 (issue 44): consent that names and pins every source of code, exit codes
that say what happened, an FP8 plan that measures what it plans, and bench verdicts that never
praise a broken or unsteady variant."""

import json
import os
import shutil
import subprocess
import sys

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
