"""Where the window's engine runs: the Engine selector ("This computer" or a host) in the status
bar, and the dialog that connects to a host of the user's ssh config.

A host's engine is `ssh_detached_engine` (engine/transport.py): it goes on when the link drops,
and the client attaches again ("Reconnecting…"). Switching cancels what runs and hands the
worker's EngineClient the new transport; its next job starts that engine, and the code a run
would execute is read and digested there before the user is asked (the controller's
`engine_host`; what was agreed to on the other machine is forgotten). The Test button asks
a fresh engine on the host for its report on a thread of its own, so the window never waits
for ssh, and says the outcome in one line. A session file (always this computer's) made with
another engine names that machine's paths: opening it offers that engine (`offer`).
"""

from __future__ import annotations

import re
import threading

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import (QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLineEdit,
                               QMessageBox, QPushButton, QVBoxLayout)

from fp16studio import __version__
from fp16studio.core.common.errors import CancelToken, InputError
from fp16studio.core.spec import trust
from fp16studio.engine import messages as m
from fp16studio.engine.client import EngineClient
from fp16studio.engine.remote_install import install_on, this_wheel
from fp16studio.engine.transport import (DEFAULT_REMOTE_PYTHON, SSH_FAILED, config_hosts,
                                         ssh_detached_engine, ssh_engine)
from .fit import ElidedLabel
from .session_controller import LOAD_TORCH, RUNS
from .status_bar import THIS_COMPUTER, engine_summary
from .worker import Job

REPORT_TASK = "fp16studio.engine.lookups:engine_report"
CONNECT = "Connect to a host…"
CONNECT_THERE, STAY = "connect", "stay"   # EngineChoice.ask_where's answers
PROBE_TIMEOUT_S = 120.0   # a host that has not answered by then (a stuck ProxyJump) is said so
# What the client says of an engine that ended before it answered (client.EngineClient._ended).
_STOPPED = re.compile(r"stopped unexpectedly \((?:exit code (?P<code>-?\d+)(?:: )?)?(?P<said>.*)\)\. ")


def probe_outcome(host: str, python: str, ending) -> tuple[str, bool]:
    """What a Test of `host` came to, in one line (its engine's report, or why there is none),
    and whether installing this version into `python` there is the remedy."""
    if isinstance(ending, m.Result):
        report = ending.value
        there = report.get("fp16studio")
        if there != __version__:
            return (f"{host}: fp16studio {there} there, {__version__} here: "
                    f"install {__version__} into {python}"), True
        return f"{host}: {engine_summary(report)}", False
    if isinstance(ending, m.Cancelled):
        return f"{host}: no answer in {PROBE_TIMEOUT_S:.0f} s", False
    found = _STOPPED.search(ending.message)
    if found is None:
        return f"{host}: {ending.message.splitlines()[0]}", False
    said = found["said"]
    if found["code"] == str(SSH_FAILED):
        return f"{host}: cannot connect" + (f" ({said})" if said else ""), False
    if "No module named" in said and "fp16studio" in said:
        return f"{host}: no fp16studio for {python} there: install {__version__} into it", True
    return f"{host}: the engine did not start ({said or 'exit code ' + str(found['code'])})", False


class HostProbe(QObject):
    """Asks a host's engine for its report on a thread of its own; `answered(line, offer)` on
    the GUI thread (offer: installing this version there is the remedy). The engine it started
    is closed after it answered. `install` puts this version there, on a thread too."""

    answered = Signal(str, bool)
    installed = Signal(str, bool)   # one line, and whether it went in

    def probe(self, host: str, python: str):
        def ask():
            token = CancelToken()
            client = EngineClient(engine=ssh_engine(host, python))
            timer = threading.Timer(PROBE_TIMEOUT_S, lambda: (token.cancel(), client.kill()))
            timer.start()
            try:
                ending = client.run(REPORT_TASK, (), {}, token, lambda event: None)
            except Exception as exc:  # noqa: BLE001 - no ssh to start: said, never raised here
                ending = m.Failed(0, str(exc))
            finally:
                timer.cancel()
                client.close(grace_s=5)
            self.answered.emit(*probe_outcome(host, python, ending))

        threading.Thread(target=ask, name="fp16studio-host-probe", daemon=True).start()

    def install(self, host: str, python: str):
        def put():
            try:
                install_on(host, python, this_wheel(), say=lambda line: None)
            except (InputError, OSError) as exc:
                self.installed.emit(str(exc), False)
            else:
                self.installed.emit(f"{host}: installed fp16studio {__version__} into {python}",
                                    True)

        threading.Thread(target=put, name="fp16studio-remote-install", daemon=True).start()


class ConnectDialog(QDialog):
    """A host (those of ~/.ssh/config offered, any name typed), the Python there, and Test."""

    tested = Signal(str)   # the Test's one line, once it came

    def __init__(self, parent=None, host: str = "", python: str = ""):
        super().__init__(parent)
        self.setWindowTitle("Connect to a host")
        self.host = QComboBox(editable=True, objectName="connectHost")
        self.host.addItems(config_hosts())
        self.host.setEditText(host or self.host.currentText())
        self.host.lineEdit().setPlaceholderText("a host of ~/.ssh/config, or user@name")
        self.python = QLineEdit(python, objectName="connectPython",
                                placeholderText=f"{DEFAULT_REMOTE_PYTHON}, or a venv's bin/python")
        self.test_button = QPushButton("Test", objectName="connectTest")
        self.install_button = QPushButton(f"Install {__version__} there",
                                          objectName="connectInstall", visible=False)
        self.install_button.setToolTip("Send this version's wheel through your ssh and pip-"
                                       "install it into the Python there (torch kept)")
        self.result = ElidedLabel("", objectName="connectResult")
        self.result.setMinimumWidth(360)
        form = QFormLayout()
        form.addRow("Host", self.host)
        form.addRow("Python there", self.python)
        form.addRow(self.test_button, self.result)
        form.addRow("", self.install_button)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.connect_button = buttons.addButton("Connect", QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)
        self._probe = HostProbe(self)
        self._probe.answered.connect(self._answered)
        self._probe.installed.connect(self._installed)
        self.test_button.clicked.connect(self.test)
        self.install_button.clicked.connect(self.install)
        self.host.currentTextChanged.connect(self._update)
        self._update()

    def chosen(self) -> tuple[str, str]:
        """(host, its Python) as the user left them."""
        return self.host.currentText().strip(), self.python.text().strip() or DEFAULT_REMOTE_PYTHON

    def test(self):
        host, python = self.chosen()
        if not host:
            return
        self.test_button.setEnabled(False)
        self.result.setText(f"Testing {host}…")
        self._probe.probe(host, python)

    def install(self):
        """This version into the Python there, then Test again."""
        host, python = self.chosen()
        self.install_button.setEnabled(False)
        self.test_button.setEnabled(False)
        self.result.setText(f"Installing fp16studio {__version__} into {python} on {host}…")
        self._probe.install(host, python)

    def _installed(self, line: str, done: bool):
        self.install_button.setEnabled(True)
        self.result.setText(line)
        if done:
            self.test()
        else:
            self.test_button.setEnabled(True)

    def _answered(self, line: str, offer: bool):
        self.result.setText(line)
        self.test_button.setEnabled(bool(self.chosen()[0]))
        self.install_button.setVisible(offer)
        self.tested.emit(line)

    def _update(self, *_):
        named = bool(self.chosen()[0])
        self.install_button.setVisible(False)   # offered for the host tested, not another
        self.connect_button.setEnabled(named)
        self.test_button.setEnabled(named and self.result.text()[:8] != "Testing ")


class EngineChoice(QObject):
    """The Engine selector and what choosing does: the worker's engine moves to that transport,
    the status bar says where it runs and what it has (an engine report read there, again after
    each run for the GPUs' memory)."""

    switched = Signal(object)   # the host now serving (None: this computer)

    def __init__(self, controller, status, parent=None):
        super().__init__(parent)
        self.controller, self.status = controller, status
        self.host: str | None = None
        self._serving = None   # the selector's data of the engine now serving: (host, python)
        self.selector = QComboBox(objectName="engineSelector")
        self.selector.setToolTip("Where the engine runs: this computer, or a host over your ssh")
        self.selector.addItem(THIS_COMPUTER, None)
        self.selector.addItem(CONNECT, CONNECT)
        self.selector.activated.connect(self._chosen)
        status.put_engine_selector(self.selector)
        self.dialog: ConnectDialog | None = None
        controller.environmentChanged.connect(lambda _env: self.read_report())
        controller.worker.jobDone.connect(self._job_done)

    def connect_to(self, host: str, python: str = DEFAULT_REMOTE_PYTHON):
        """Run the window's engine on `host` from the next job on."""
        index = self.selector.findData((host, python))
        if index < 0:
            index = self.selector.count() - 1   # before "Connect to a host…"
            self.selector.insertItem(index, host if python == DEFAULT_REMOTE_PYTHON
                                     else f"{host} ({python})", (host, python))
        self.selector.setCurrentIndex(index)
        self._serving = (host, python)
        self._switch(ssh_detached_engine(host, python), host)

    def use_this_computer(self):
        self.selector.setCurrentIndex(0)
        self._serving = None
        self._switch(None, None)

    def open_dialog(self) -> ConnectDialog:
        """The connect dialog, shown without waiting for it (Connect switches)."""
        self.dialog = dialog = ConnectDialog(self.selector.window(), self.host or "")
        dialog.accepted.connect(lambda: self.connect_to(*dialog.chosen()))
        dialog.open()
        return dialog

    def offer(self, host: str, python: str, file: str) -> bool:
        """A session made with the engine on `host` (its `python`) is being opened while
        another engine serves: its model, dataset and preprocess are that host's paths. The
        user chooses (`ask_where`): connect to it (then open), open it with the engine now
        serving (its paths read there), or not at all (False)."""
        answer = self.ask_where(host, python, file)
        if answer == CONNECT_THERE:
            self.connect_to(host, python)
        return answer is not None

    def ask_where(self, host: str, python: str, file: str) -> str | None:
        """CONNECT_THERE, STAY, or None (Cancel, Escape)."""
        now = self.host or THIS_COMPUTER.lower()
        made = host if python == DEFAULT_REMOTE_PYTHON else f"{host} ({python})"
        box = QMessageBox(QMessageBox.Icon.Question, "Open on which engine?",
                          f"{file} was made with the engine on {made}: its model, dataset and "
                          f"preprocess are {host}'s paths. The engine now runs on {now}.",
                          QMessageBox.StandardButton.Cancel, self.selector.window())
        there = box.addButton(f"Connect to {host}", QMessageBox.ButtonRole.AcceptRole)
        stay = box.addButton(f"Open on {now}", QMessageBox.ButtonRole.ActionRole)
        box.setDefaultButton(there)
        box.exec()
        return {there: CONNECT_THERE, stay: STAY}.get(box.clickedButton())

    def read_report(self):
        """Ask the engine for its report (a look-up: the latest asked wins)."""
        host = self.host
        self.controller.worker.submit(Job(
            "engine-report", REPORT_TASK, supersede=True,
            on_result=lambda report: self.host == host and self.status.set_engine_report(report),
            on_error=lambda message, _detail: self.host == host and self.status.engine.setText(
                f"{host or THIS_COMPUTER}: {message}")))

    def _chosen(self, index: int):
        data = self.selector.itemData(index)
        if data == CONNECT:   # the selector stays on the engine now serving until Connect
            self.selector.setCurrentIndex(self.selector.findData(self._serving))
            self.open_dialog()
        elif data is None and self._serving is not None:
            self.use_this_computer()
        elif data is not None and data != self._serving:
            self.connect_to(*data)

    def _switch(self, engine, host: str | None):
        self.controller.cancel()
        self.controller.worker.cancel()
        self.controller.worker.engine.use(engine)
        self.controller.state.environment = None   # the next run's engine says its own versions
        # What the user agreed to run is pinned by path: another machine's files are others.
        self.controller.engine_host = host
        self.controller.engine_where = self._serving
        trust.agree(())
        self.host = host
        self.status.set_engine(host)
        self.controller.logged.emit("info", f"Engine: {host or THIS_COMPUTER}.")
        self.read_report()
        self.switched.emit(host)

    def _job_done(self, job, outcome):
        """A run in the engine (not a trace: its script runs in a process of its own, and the
        engine need not load torch for it) changed what its GPUs hold: read them again."""
        if job.kind in RUNS and job.kind in LOAD_TORCH and outcome == "finished":
            self.read_report()
