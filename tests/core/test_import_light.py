"""Importing the engine must stay cheap and Qt-free: the window imports it at start-up. The
window's session state is plain Python too: neither Qt, nor torch, nor the engine process."""

import json
import subprocess
import sys

HEAVY = ("torch", "transformers", "datasets", "PySide6", "pyqtgraph")


def loaded_by(modules: str, watched) -> list:
    """Which of `watched` a fresh interpreter has loaded after importing `modules`."""
    code = (f"import json, sys, {modules}; "
            f"print(json.dumps([m for m in {tuple(watched)!r} if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_core_imports_neither_qt_nor_torch():
    assert loaded_by("fp16studio.core, fp16studio.cli, fp16studio.core.present.vocabulary, "
                     "fp16studio.core.diagnostics.tree_index, fp16studio.engine.client, "
                     "fp16studio.engine.server, fp16studio.engine.tasks, fp16studio.engine.lookups",
                     HEAVY) == []


def test_the_session_state_is_qt_torch_and_engine_free():
    assert loaded_by("fp16studio.session_state", HEAVY + ("fp16studio.gui", "fp16studio.engine")) == []


def test_core_source_never_imports_qt():
    from pathlib import Path

    import fp16studio.core

    sources = list(Path(fp16studio.core.__file__).parent.rglob("*.py"))
    assert len(sources) > 40  # every package of core, not just its __init__
    for path in sources:
        text = path.read_text()
        for banned in ("PySide6", "pyqtgraph", "fp16studio.gui"):
            assert f"import {banned}" not in text and f"from {banned}" not in text, path
