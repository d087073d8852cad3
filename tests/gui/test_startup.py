"""The window from its first second: what it says while the engine starts, torch loads and the
demo is prepared, and a Run asked for meanwhile (queued: Cancel reaches it)."""

import subprocess
import sys

import pytest

from fp16studio.gui import MainWindow
from window_steps import RUN_TIMEOUT_MS


@pytest.fixture
def fresh(qtbot):
    """A window whose engine has not started: its demo is still being prepared."""
    window = MainWindow()
    qtbot.addWidget(window)
    said = [window.status.message.text()]
    window.controller.statusChanged.connect(said.append)
    window.show()
    return window, said


def test_the_status_says_what_the_window_waits_for(qtbot, fresh):
    window, said = fresh
    assert said[0] == "Preparing the demo pipeline…"   # at once, not "Ready"
    qtbot.waitUntil(lambda: window.spec is not None, timeout=RUN_TIMEOUT_MS)
    assert said.index("Starting the engine process…") < said.index("Loading torch…") < said.index(
        "Preparing the demo pipeline 'map-cast'…")


def test_a_run_asked_for_before_the_demo_is_ready_is_queued_and_cancelled(qtbot, fresh):
    window, said = fresh
    assert window.spec is None and window.run_diagnosis()
    assert not window.act_run.isEnabled() and window.act_cancel.isEnabled()
    assert window.stage_label.text() == "Queued…" and said[-1].startswith("Queued: starts when")
    window.act_cancel.trigger()
    assert window.act_run.isEnabled() and not window.act_cancel.isEnabled()
    qtbot.waitUntil(lambda: window.spec is not None, timeout=RUN_TIMEOUT_MS)
    qtbot.wait(100)
    assert not window.controller.busy and window.diagnosis is None   # it never started


def test_a_queued_run_starts_by_itself_once_the_demo_is_ready(qtbot, fresh):
    window, _ = fresh
    with qtbot.waitSignal(window.diagnosisFinished, timeout=RUN_TIMEOUT_MS) as finished:
        assert window.run_diagnosis()
        assert window.act_cancel.isEnabled()
    assert finished.args[0]["spec"]["model"].endswith("tiny-resnet")
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=RUN_TIMEOUT_MS)


def test_a_run_queued_behind_another_job_says_so_and_cancel_ends_it_at_once(qtbot, fresh):
    import engine_jobs as work

    from fp16studio.gui.worker import Job

    window, said = fresh
    qtbot.waitUntil(lambda: window.spec is not None and not window.worker.pending(),
                    timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.worker.jobStarted, timeout=RUN_TIMEOUT_MS):
        window.worker.submit(Job("warm-up", work.ignore_cancel, (1.5,)))
    assert window.run_diagnosis()
    assert window.stage_label.text() == "Queued…"
    assert said[-1] == "Queued: starts when the engine has loaded torch."
    assert not window.act_run.isEnabled() and window.act_cancel.isEnabled()
    window.act_cancel.trigger()   # not after the job ahead: now
    assert window.act_run.isEnabled() and not window.act_cancel.isEnabled()


def test_the_window_shows_before_its_charts_libraries_are_imported(tmp_path):
    """pyqtgraph and NumPy (the Compare and Drift tabs' charts) and psutil are not part of the
    window's start (issue 31): they come after it shows, and the Compare tab, once opened, has
    its charts. In a process of its own: this one has imported them already."""
    code = ("import sys\n"
            "from PySide6.QtWidgets import QApplication\n"
            "app = QApplication([])\n"
            "from fp16studio.gui import MainWindow\n"
            "w = MainWindow()\n"
            "w.show()\n"
            "print(sorted(m for m in ('pyqtgraph', 'numpy', 'psutil') if m in sys.modules))\n"
            "tabs = w.main_tabs\n"
            "tabs.setCurrentIndex([tabs.tabText(i) for i in range(tabs.count())].index('Compare'))\n"
            "print(tabs.currentWidget() is w.compare, w.benchPlot.isVisibleTo(w))\n"
            "w.close()\n")
    script = tmp_path / "show_the_window.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines() == ["[]", "True True"]


def test_the_charts_pages_are_made_soon_after_the_window_shows(qtbot, fresh):
    """Not at the first click on Benchmark or Compare with float32, which would wait for them."""
    window, _ = fresh
    pages = window.pages
    assert pages.made("compare") is None and pages.made("drift") is None
    qtbot.waitUntil(lambda: None not in (pages.made("compare"), pages.made("drift")), timeout=60_000)
    assert window.main_tabs.indexOf(window.compare) == 2 and window.main_tabs.tabText(3) == "Drift"


@pytest.mark.parametrize("view_class", ["CompareView", "DriftView"])
def test_a_page_made_meanwhile_is_laid_out_before_its_tab_first_shows(qtbot, count_events, view_class):
    """A page's widgets are laid out only once it shows: the Compare tab's first show, as
    Benchmark is pressed, resized every widget of the page and its charts' ranges (8 ms of the
    press's 20). A chart page made meanwhile is laid out unseen at its tab's size, again once
    the window is resized: its tab's first show resizes none of its widgets."""
    import importlib
    import threading

    from PySide6.QtCore import QEvent
    from PySide6.QtWidgets import QTabWidget, QWidget

    from fp16studio.gui.later_pages import LaterPages

    def first_show_resizes(tabs, page):
        """The widgets of `page` resized as its tab first shows it."""
        counters = [count_events(w, QEvent.Type.Resize) for w in [page, *page.findChildren(QWidget)]]
        tabs.setCurrentWidget(page)
        qtbot.wait(50)
        assert page.isVisible()
        return [type(counter.parent()).__name__ for counter in counters if counter.count]

    module = "compare" if view_class == "CompareView" else "drift_view"
    cls = getattr(importlib.import_module(f"fp16studio.gui.{module}"), view_class)
    imported = threading.Thread(target=lambda: None)
    imported.start()
    imported.join()

    def page_made_meanwhile():
        tabs = QTabWidget()
        qtbot.addWidget(tabs)
        tabs.addTab(QWidget(), "shown")
        tabs.resize(640, 520)
        tabs.show()
        pages = LaterPages(tabs)
        pages.add("charts", "Charts", cls.in_parts)
        pages.make_after(imported)
        qtbot.waitUntil(lambda: pages.made("charts") is not None, timeout=10_000)
        page = pages.made("charts")
        qtbot.waitUntil(lambda: page.geometry() == tabs.currentWidget().geometry(), timeout=5_000)
        return tabs, page

    tabs, page = page_made_meanwhile()
    assert first_show_resizes(tabs, page) == []

    tabs, page = page_made_meanwhile()
    tabs.resize(900, 700)   # the user makes the window larger before the tab is first shown
    assert page.isHidden() and page.size() != tabs.currentWidget().size()
    qtbot.waitUntil(lambda: page.size() == tabs.currentWidget().size(), timeout=5_000)
    assert first_show_resizes(tabs, page) == []


def test_a_page_is_made_a_part_per_event_or_all_at_once_when_needed(qtbot):
    """Each part of a page in an event of its own, never all of them in one (the Compare page
    held the window 87 ms under load); a page needed before that is finished at once."""
    import threading

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QTabWidget, QWidget

    from fp16studio.gui.later_pages import LaterPages

    spins = [0]          # a turn of the event loop: another event ran between two parts
    spinner = QTimer(interval=0)
    spinner.timeout.connect(lambda: spins.__setitem__(0, spins[0] + 1))
    spinner.start()

    def in_parts(parent):   # a page made in three parts, the loop's turn at each noted
        page = QWidget(parent)
        page.made_in = parent
        page.times = []
        for more in (True, True, False):
            page.times.append(spins[0])
            if more:
                yield
        return page

    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    tabs.addTab(QWidget(), "shown")   # the current tab: a page shown is needed at once
    pages = LaterPages(tabs)
    pages.add("a", "A", in_parts)
    pages.add("b", "B", in_parts)
    imported = threading.Thread(target=lambda: None)
    imported.start()
    imported.join()
    pages.make_after(imported)
    qtbot.waitUntil(lambda: pages.made("a") is not None, timeout=10_000)
    times = pages.made("a").times
    assert len(times) == 3
    assert all(b > a for a, b in zip(times, times[1:])), times
    assert tabs.widget(1) is pages.made("a") and tabs.tabText(1) == "A"
    # Made where it stays (the tabs' own stack): a page moved into its tab is restyled whole.
    assert pages.made("a").made_in is tabs.widget(0).parentWidget() is pages.made("a").parentWidget()
    page_b = pages.page("b")               # needed before its turn: every part made now
    assert len(page_b.times) == 3 and tabs.widget(2) is page_b and tabs.tabText(2) == "B"
    assert len(set(page_b.times)) == 1     # in this one event
    spinner.stop()


def test_the_import_thread_starts_once_every_qt_type_is_made(qtbot, tmp_path, monkeypatch):
    """PySide6 makes a Qt type on its first use, and two threads making one at once crashed a
    CI run (pyqtgraph's import makes them all): the import thread finds none left to make in
    the Qt modules loaded when it was asked for."""
    from PySide6 import QtXml   # no other test loads it: none of its types made yet
    from PySide6.QtCore import QObject

    from fp16studio.gui.later_pages import ImportsMeanwhile, qt_types_not_made

    if not any(module is QtXml for module, _ in qt_types_not_made()):
        pytest.skip("this PySide6 makes a module's types when it is imported")
    (tmp_path / "types_spy.py").write_text("from fp16studio.gui.later_pages import "
                                           "qt_types_not_made\nLEFT = list(qt_types_not_made())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    parent = QObject()
    try:
        loading = ImportsMeanwhile(("types_spy",), parent)
        assert loading.is_alive()
        qtbot.waitUntil(lambda: not loading.is_alive(), timeout=10_000)
        assert sys.modules["types_spy"].LEFT == []
    finally:
        sys.modules.pop("types_spy", None)


def test_the_windows_start_up_is_kept_out_of_collections_once_its_pages_are_made(qtbot):
    """A full pass of the collector over the window's long-lived objects held it 154 ms under
    load: what the import thread made is frozen when it is done, the pages once the last is
    made (a page made after a freeze would be walked by every pass)."""
    import gc

    def frozen(obj) -> bool:
        return not any(o is obj for o in gc.get_objects())

    gc.unfreeze()   # what earlier tests froze
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    assert gc.get_freeze_count() == 0
    qtbot.waitUntil(lambda: all(window.pages.made(name) is not None for name in ("compare", "drift")),
                    timeout=30_000)
    qtbot.waitUntil(lambda: frozen(window.pages.made("compare")) and frozen(window.pages.made("drift")),
                    timeout=5_000)
    assert gc.get_freeze_count() > len(gc.get_objects())   # most of what lives, far from all


@pytest.mark.parametrize("view_class", ["CompareView", "DriftView"])
def test_a_chart_page_makes_no_plot_item_nor_any_widget_outside_itself(qtbot, view_class):
    """A pyqtgraph PlotItem makes its "Plot Options" form, some 40 widgets out of any window, in
    its constructor: 20-35 ms of a chart page's making each (issue 43). The chart pages draw
    with light_plot.LightPlot: their scenes hold no PlotItem, and making a page makes no form
    nor menu out of it (Qt's graphics views leave an empty widget or two of their own)."""
    import importlib

    import pyqtgraph as pg
    from PySide6.QtWidgets import QApplication, QMenu, QWidget

    module = "compare" if view_class == "CompareView" else "drift_view"
    cls = getattr(importlib.import_module(f"fp16studio.gui.{module}"), view_class)
    before = set(QApplication.topLevelWidgets())
    view = cls()
    qtbot.addWidget(view)
    made = set(QApplication.topLevelWidgets()) - before
    assert view in made
    assert not [widget for widget in made - {view} if isinstance(widget, QMenu) or widget.findChildren(QWidget)]
    charts = view.findChildren(pg.GraphicsView)
    assert charts and not any(isinstance(item, pg.PlotItem) for chart in charts for item in chart.scene().items())


@pytest.mark.parametrize("view_class", ["CompareView", "DriftView"])
def test_a_chart_page_is_made_top_down_each_widget_in_its_place(qtbot, view_class):
    """A finished group of widgets moved into another widget (a table, a chart, a splitter
    with them) is restyled whole under the style sheet: the Drift page's last part, its table
    and plot moved into a splitter and the page, held the GUI thread 11-19 ms under load (issue
    43). Made in parts, a chart page makes each widget in its place: none that holds widgets
    changes its parent (a leaf placed in a layout may; Qt moves its scroll areas' own leaves)."""
    import importlib

    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication, QWidget

    from fp16studio.gui.later_pages import all_parts

    class Moves(QObject):
        def __init__(self):
            super().__init__()
            self.groups = []

        def eventFilter(self, watched, event):
            if (event.type() == QEvent.Type.ParentChange and isinstance(watched, QWidget)
                    and watched.findChildren(QWidget)):
                self.groups.append(type(watched).__name__)
            return False

    module = "compare" if view_class == "CompareView" else "drift_view"
    cls = getattr(importlib.import_module(f"fp16studio.gui.{module}"), view_class)
    moves = Moves()
    host = QWidget()
    qtbot.addWidget(host)
    QApplication.instance().installEventFilter(moves)
    try:
        all_parts(cls.in_parts(host))
    finally:
        QApplication.instance().removeEventFilter(moves)
    assert moves.groups == [], moves.groups


@pytest.mark.parametrize("view_class", ["CompareView", "DriftView"])
def test_a_chart_page_polishes_each_part_in_its_own_event(qtbot, view_class):
    """A page never shown is polished whole under the style sheet at its tab's first show (the
    Compare tab as Benchmark is pressed): made in parts, each part's widgets are polished in
    that part's event, so the page is polished when made and the tab's first show has none of
    it; and the page stays hidden in its parent until its tab shows it."""
    import importlib

    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QWidget

    module = "compare" if view_class == "CompareView" else "drift_view"
    cls = getattr(importlib.import_module(f"fp16studio.gui.{module}"), view_class)
    host = QWidget()
    qtbot.addWidget(host)
    host.show()
    parts = cls.in_parts(host)
    made = 0
    while True:
        try:
            next(parts)
        except StopIteration as done:
            view = done.value
            break
        made += 1
        unpolished = [type(w).__name__ for w in host.findChildren(QWidget)
                      if not w.testAttribute(Qt.WidgetAttribute.WA_WState_Polished)]
        assert unpolished == [], (made, unpolished)
    assert made > 3 and view.parentWidget() is host and view.isHidden()
    assert all(w.testAttribute(Qt.WidgetAttribute.WA_WState_Polished) for w in view.findChildren(QWidget))


@pytest.mark.parametrize("view_class", ["CompareView", "DriftView"])
def test_a_chart_pages_plots_make_their_context_menus_when_first_opened(qtbot, view_class):
    """A plot's context menu is about 40 widgets, once a part of its page's making each (issues
    31, 43): every plot of a made page has its menu enabled and none made; each is made the first
    time it is asked for, with its entries, and kept."""
    import importlib

    import pyqtgraph as pg

    module = "compare" if view_class == "CompareView" else "drift_view"
    view = getattr(importlib.import_module(f"fp16studio.gui.{module}"), view_class)()
    qtbot.addWidget(view)
    made = [item for chart in view.findChildren(pg.GraphicsView) for item in chart.scene().items()
            if isinstance(item, pg.ViewBox)]   # each plot's view box (a PlotItem's, a LightPlot's)
    assert made and all(box.menuEnabled() and box.menu is None for box in made)
    for box in made:
        menu = box.getMenu(None)
        assert menu is not None and menu.actions() and box.getContextMenus(None)
        assert box.getMenu(None) is menu


def test_the_status_bar_samples_memory_once_psutil_is_imported_on_a_thread(qtbot, monkeypatch):
    """Its import held the GUI thread 15-20 ms at the first sample (issue 31): a thread imports
    it, and the memory is shown from the first tick after that, never imported by the window."""
    import importlib
    import threading

    from PySide6.QtWidgets import QStatusBar

    from fp16studio.gui.status_bar import StatusInfo

    importers = []

    class Spy:   # asked only where psutil is not imported yet
        def find_spec(self, name, path=None, target=None):
            if name == "psutil":
                importers.append(threading.current_thread())

    monkeypatch.delitem(sys.modules, "psutil", raising=False)
    monkeypatch.setattr(sys, "meta_path", [Spy(), *sys.meta_path])
    go = threading.Event()
    loading = threading.Thread(target=lambda: (go.wait(), importlib.import_module("psutil")), daemon=True)
    loading.start()
    bar = QStatusBar()
    qtbot.addWidget(bar)
    status = StatusInfo(bar)
    status.start_sampling(loading)
    try:
        status._timer.timeout.emit()   # a tick while the import is under way
        assert status.memory.text() == "" and importers == []
    finally:
        go.set()
        loading.join()
    status._timer.timeout.emit()
    assert status.memory.text().startswith("RAM") and importers == [loading]
