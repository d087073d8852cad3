"""Importing the engine must stay cheap and Qt-free: the window imports it at start-up."""

import subprocess
import sys


def test_core_imports_neither_qt_nor_torch():
    code = ("import sys, fp16studio.core, fp16studio.cli, fp16studio.core.present.vocabulary, "
            "fp16studio.core.diagnostics.tree_index, fp16studio.engine.client, fp16studio.engine.server, "
            "fp16studio.engine.tasks, fp16studio.engine.lookups; "
            "heavy = [m for m in ('torch', 'transformers', 'datasets', 'PySide6', 'pyqtgraph') "
            "if m in sys.modules]; print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_core_source_never_imports_qt():
    from pathlib import Path

    import fp16studio.core

    for path in Path(fp16studio.core.__file__).parent.glob("*.py"):
        text = path.read_text()
        for banned in ("PySide6", "pyqtgraph", "fp16studio.gui"):
            assert f"import {banned}" not in text and f"from {banned}" not in text, path
