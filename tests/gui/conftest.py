import pytest

from fp16studio.core.diagnostics.tree import TensorNode


@pytest.fixture(autouse=True)
def _private_folders(monkeypatch, tmp_path_factory):
    """Recent files and the crash autosave go to a per-test folder; the demo's tiny models are
    built once per session into a shared one."""
    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
    monkeypatch.setenv("FP16STUDIO_CACHE", str(_demo_cache(tmp_path_factory)))


@pytest.fixture(autouse=True)
def _no_modal_dialogs(monkeypatch):
    """A modal dialog would wait forever offscreen: closing a window with unsaved changes
    (every test's teardown) discards them, other questions are answered yes, and warnings are
    not shown. Tests about asking replace `_ask_unsaved` or `_confirm` themselves."""
    from fp16studio.gui import main_window
    from fp16studio.gui.file_actions import DISCARD

    monkeypatch.setattr(main_window.MainWindow, "_confirm", lambda self, title, text: True)
    monkeypatch.setattr(main_window.MainWindow, "_ask_unsaved", lambda self, title, text: DISCARD)


@pytest.fixture
def monkeypatch(monkeypatch):
    """pytest's monkeypatch, refusing to swap at a class a method of ours that overrides a Qt
    method (`TensorTreeModel.data`): PySide keeps the Python method it found for a C++ virtual,
    and once the swap is undone it called a freed function (a later test's theme switch crashed
    the process). Count or change such a method through a subclass instead."""
    swap = monkeypatch.setattr

    def setattr(target, *args, **kwargs):
        if isinstance(target, type) and args and isinstance(args[0], str):
            _refuse_an_override_of_qt(target, args[0])
        return swap(target, *args, **kwargs)

    monkeypatch.setattr = setattr
    return monkeypatch


def _refuse_an_override_of_qt(cls: type, name: str):
    ours = [base for base in cls.__mro__ if not base.__module__.startswith("PySide6.")
            and base is not object and name in vars(base)]
    overridden = [base for base in cls.__mro__
                  if base.__module__.startswith("PySide6.") and name in vars(base)]
    if ours and overridden:
        raise AssertionError(f"{cls.__name__}.{name} overrides {overridden[0].__name__}.{name}: "
                             "swap it through a subclass, not at the class (conftest.monkeypatch)")


_cache = {}


def _demo_cache(factory):
    if "dir" not in _cache:
        _cache["dir"] = factory.mktemp("demo-cache")
    return _cache["dir"]


@pytest.fixture
def make_tree():
    return build_tree


def build_tree(modules=3, params=2, wide=0, problem_at=None):
    """A pipeline tree like the engine's: model modules with parameters, a batch, activations.

    `wide` adds one module with that many parameters (for lazy fetching); `problem_at` marks the
    named parameter path as an error.
    """
    root = TensorNode("pipeline", "", "group")
    model = root.add(TensorNode("Net", "model", "module"))
    for m in range(modules):
        module = model.add(TensorNode(f"layer{m}", f"layer{m}", "module", note="Linear"))
        for p in range(params):
            path = f"layer{m}.w{p}"
            module.add(TensorNode(f"w{p}", path, "parameter", shape=(4, 4),
                                  dtype="float16" if p % 2 else "float32", device="cpu",
                                  bytes=64 if p % 2 == 0 else 32,
                                  status="error" if path == problem_at else "ok"))
    if wide:
        big = model.add(TensorNode("big", "big", "module"))
        for i in range(wide):
            big.add(TensorNode(f"p{i}", f"big.p{i}", "parameter", shape=(2,), dtype="float32",
                               device="cpu", bytes=8))
    batch = root.add(TensorNode("batch", "batch", "group"))
    batch.add(TensorNode("input_ids", "batch.input_ids", "input", shape=(2, 8), dtype="int64",
                         device="cpu", bytes=128))
    acts = root.add(TensorNode("activations", "activations", "group"))
    acts.add(TensorNode("layer0 → output", "activations.0.output", "activation", shape=(2, 4),
                        dtype="float16", device="cpu", bytes=16, absmax=3.5))
    return root


@pytest.fixture
def count_events():
    """`count_events(widget, kind)`: an object whose `count` is how many events of `kind`
    (QEvent.Type) `widget` has been sent since (reset it by assigning 0), and `rects` the rect
    of each that has one (a paint's)."""
    from PySide6.QtCore import QObject

    class Counter(QObject):
        def __init__(self, widget, kind):
            super().__init__(widget)
            self.kind, self.count, self.rects = kind, 0, []
            widget.installEventFilter(self)

        def eventFilter(self, _watched, event):
            if event.type() == self.kind:
                self.count += 1
                if hasattr(event, "rect"):
                    self.rects.append(event.rect())
            return False

    return Counter
