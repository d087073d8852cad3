"""The window's session as plain Python: what it holds, and what follows from it.

A session is a spec, the file it came from, and one result slot per kind: the findings (a run
of the spec, a trace of a user's script, or what a saved session brought), the benchmark and the
drift from float32. Each slot holds the spec it is of. Whether the findings are stale, whether
their fixes are one click, which findings are shown, what the panels say about what they show
and which spec a fix applies to all follow from the slots (and from the script being traced,
whose findings are about to replace the slot's); nothing of that is kept beside them. A fix is
applied only while the spec it was found for is the current one. Whether a spec read from a file may run its
preprocess is decided here too (CONTRACT §6), with the question asked through a callable.

No Qt, no torch: fp16studio.gui.session_controller adapts this object to signals, the undo stack
and the worker, and tests/core/test_session_state.py drives it without a QApplication.
"""

from __future__ import annotations

from collections.abc import Callable
import posixpath
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import Any

from fp16studio.core import Fix, InputError, PipelineSpec
from fp16studio.state_events import Evented

# Where the findings slot's result came from.
RUN = "run"        # a diagnosis of `of`: its fixes are edits of that spec
TRACE = "trace"    # a trace of a user's script, not (yet) the pipeline: of no spec, fixes are code
SAVED = "saved"    # a saved session's findings: of the spec they were run on, shown until a run,
                   # never fixed from

NO_MODEL = ("Choose a model first: type a Hub id or a local folder in the Model field, pick one "
            "from your Hugging Face cache, or drop a folder on it.")


@dataclass(frozen=True, eq=False)   # a result is itself, not its value (state_events)
class Slot:
    """A result (a BenchResult, a DriftResult) and the spec it is of."""

    value: Any
    of: PipelineSpec | None


@dataclass(frozen=True, eq=False)
class Findings:
    """The findings slot: a Diagnosis (or ScriptTrace), where it came from, the spec it is of
    (None for a trace), its --json document, and what the run's tree gives the window."""

    diagnosis: Any
    of: PipelineSpec | None
    origin: str
    doc: dict
    tree_index: Any = None            # TreeIndex of diagnosis.tree, built off the GUI thread
    located: dict = field(default_factory=dict)   # finding location -> tree node
    gpu_memory: int | None = None


@dataclass(frozen=True)
class FixPlan:
    """What applying a fix means: the fix, the spec it was found for (the only spec it is ever
    applied to) and the run that checks it (`"diagnose"` or `"drift"`)."""

    fix: Fix
    base: PipelineSpec
    rerun: str

    def fixed_spec(self) -> PipelineSpec:
        """`base` with the fix made (InputError when its edits do not make a valid spec)."""
        from fp16studio.core.diagnostics.fixing import apply_fix

        return apply_fix(self.base, self.fix)


@dataclass(frozen=True)
class Consent:
    """The answer to "may this spec's code run?": `granted`, what the user was asked (if
    anything), and `note`, a warning to pass on (nothing could be asked: the run will say why)."""

    granted: bool
    question: str | None = None
    note: str | None = None


def arrived(diagnosis, gpu_memory: int | None = None) -> tuple:
    """(diagnosis, its tree's TreeIndex or None, gpu_memory, its --json document) for
    `took_diagnosis`, with the diagnosis's inventory summarised by core (`tree.summary`, what
    `diagnose --json` reports): the walks of the tree and the document's encoding, done where
    the result arrives (the worker thread) rather than on the GUI thread."""
    index = None
    if diagnosis.tree is not None:
        from fp16studio.core.diagnostics.tree_index import TreeIndex

        if diagnosis.inventory is None:
            from fp16studio.core.diagnostics.tree import summary

            diagnosis.inventory = summary(diagnosis.tree)
        index = TreeIndex(diagnosis.tree)
    return diagnosis, index, gpu_memory, diagnosis.to_json()


# The result slots, each of the spec it was made from, and how the Log names them.
RESULTS = {"findings": "findings", "bench": "benchmark", "drift": "drift", "fp8": "FP8 plan"}
KEPT_SPECS = 8   # the specs whose results Undo and Redo can bring back (each may hold a tree)


class SessionState(Evented):
    """The session, its fields evented (fp16studio.state_events): each announces its change,
    and so does each value DERIVED from it, once per batch (`events.blocker()`)."""

    FIELDS = ("spec", "path", "findings", "bench", "drift", "fp8", "tracing", "device", "environment")
    DERIVED = {
        "diagnosis": ("findings",), "trace": ("findings",), "stale": ("spec", "findings"),
        "bench_result": ("bench",), "bench_stale": ("spec", "bench"),
        "drift_result": ("drift",), "drift_stale": ("spec", "drift"),
        "fp8_plan": ("fp8",), "fp8_stale": ("spec", "fp8"),
        "why_not_continue": ("findings", "tracing"),
    }
    BY_VALUE = (PipelineSpec,)

    def __init__(self):
        super().__init__(spec=None, path=None, findings=None, bench=None, drift=None, fp8=None,
                         tracing=None, device=None, environment=None)
        # spec: PipelineSpec | None; path: the spec or session file it was read from;
        # findings: Findings | None; bench, drift, fp8: Slot | None; tracing: the script (its
        # name) whose trace is under way; device: where the latest result ran; environment:
        # the engine's versions (Diagnosis.environment) once it has loaded torch.
        self.run_when_ready = False            # Run was asked for before there was a spec
        self._saved_bench: Slot | None = None  # the figures the session's file holds
        self._bench_replaced: Slot | None = None  # the figures a benchmark under way replaces
        self.dropped: str | None = None        # what the session opened last could not read
        self._kept: dict[PipelineSpec, dict[str, Any]] = {}   # spec -> its results left behind

    # -- adopting a spec ------------------------------------------------------------------------
    def start(self, spec: PipelineSpec, diagnosis_doc: dict | None = None,
              bench_doc: dict | None = None, path=None):
        """A freshly opened spec (every field announced). A saved session's results are read
        by `read_saved`: what cannot be read is left out, and `dropped` says what. Its findings
        are of the spec their document says was run (the session's own spec unless it was
        edited after that run: then they are stale); its figures were saved with it
        (`saved_bench`). Nothing of the previous spec's results stays, nor can come back."""
        diagnosis, bench, self.dropped = read_saved(diagnosis_doc, bench_doc)
        with self.events.blocker():
            self.events.renew()
            self.spec, self.path = spec, Path(path) if path else None
            self.findings = None
            if diagnosis is not None:
                of = spec if same_run(diagnosis.spec, spec) else diagnosis.spec
                self.findings = Findings(diagnosis, of, SAVED, diagnosis_doc)
            self.bench = self._saved_bench = Slot(bench, spec) if bench is not None else None
            self.drift = self.fp8 = self.tracing = None
            self.device = diagnosis.device if diagnosis is not None else None
        self._kept.clear()

    def set_spec(self, spec: PipelineSpec):
        """Make `spec` current (an edit, an undo, a redo). The results left behind are kept
        with the spec they are of (the last KEPT_SPECS specs'), and `spec`'s own come back. A
        result of another model than `spec`'s with none of `spec` to take its place is
        dropped (another model's figures or plan are not this one's); findings stay, marked
        stale, unless a trace is shown (of no spec: it stays)."""
        with self.events.blocker():
            self._keep_results()
            own = self._kept.get(spec, {})
            self.spec = spec
            for kind in RESULTS:
                slot = getattr(self, kind)
                if kind == "findings" and slot is not None and slot.origin == TRACE:
                    continue
                if kind in own:
                    setattr(self, kind, own[kind])
                elif slot is not None and kind != "findings" and _model(slot.of) != _model(spec):
                    setattr(self, kind, None)

    def _keep_results(self):
        for kind in RESULTS:
            slot = getattr(self, kind)
            if slot is not None and slot.of is not None:
                self._kept.setdefault(slot.of, {})[kind] = slot
                self._kept[slot.of] = self._kept.pop(slot.of)   # the latest last
        while len(self._kept) > KEPT_SPECS:
            del self._kept[next(iter(self._kept))]

    def results_said(self) -> str:
        """What the window shows of the results, in a phrase (the Log's, after an Undo or a
        Redo): "showing this spec's findings, and another version's drift (marked stale)"."""
        current = [word for kind, word in RESULTS.items() if self._current(kind)]
        stale = [word for kind, word in RESULTS.items()
                 if getattr(self, kind) is not None and not self._current(kind)]
        said = [f"this spec's {_listed(current)}" if current else "no result of this spec (Run to make one)"]
        if stale:
            said.append(f"another version's {_listed(stale)} (marked stale)")
        return "showing " + ", and ".join(said)

    def _current(self, kind: str) -> bool:
        slot = getattr(self, kind)
        return slot is not None and slot.of == self.spec

    # -- what follows from the slots ------------------------------------------------------------
    @property
    def diagnosis(self):
        """The Diagnosis (or ScriptTrace) whose findings and tree are shown, or None."""
        return self.findings.diagnosis if self.findings else None

    @property
    def diagnosis_doc(self) -> dict | None:
        return self.findings.doc if self.findings else None

    @property
    def trace(self):
        """The script trace shown while it is not the pipeline (its fixes are code), or None."""
        return self.findings.diagnosis if self.findings and self.findings.origin == TRACE else None

    @property
    def tree_index(self):
        return self.findings.tree_index if self.findings else None

    @property
    def located(self) -> dict:
        return self.findings.located if self.findings else {}

    @property
    def gpu_memory(self) -> int | None:
        return self.findings.gpu_memory if self.findings else None

    @property
    def inventory(self) -> dict | None:
        """Core's inventory of the findings shown (their document's), or None."""
        return self.findings.doc.get("inventory") if self.findings else None

    @property
    def stale(self) -> bool:
        """The spec changed since the findings were made (a trace is of no spec: never stale)."""
        return self.findings is not None and self.findings.origin != TRACE and self.findings.of != self.spec

    @property
    def run_current(self) -> bool:
        """The findings are a run of the current spec."""
        return self.findings is not None and self.findings.origin == RUN and self.findings.of == self.spec

    @property
    def bench_result(self):
        """The BenchResult shown, or None."""
        return self.bench.value if self.bench else None

    @property
    def bench_stale(self) -> bool:
        return self.bench is not None and self.bench.of != self.spec

    @property
    def drift_result(self):
        return self.drift.value if self.drift else None

    @property
    def drift_current(self) -> bool:
        return self.drift is not None and self.drift.of == self.spec

    @property
    def drift_stale(self) -> bool:
        return self.drift is not None and self.drift.of != self.spec

    @property
    def fp8_plan(self):
        """The Fp8Plan shown, or None."""
        return self.fp8.value if self.fp8 else None

    @property
    def fp8_stale(self) -> bool:
        return self.fp8 is not None and self.fp8.of != self.spec

    @property
    def why_not_continue(self) -> str | None:
        """Why Continue as a Pipeline is off, in the user's words; None while it is on."""
        if self.tracing is not None:
            return f"Continue as a Pipeline waits for the trace of {self.tracing} to end."
        trace = self.trace
        if trace is None:
            return ("Continue as a Pipeline turns a traced script into a pipeline you can Run, fix "
                    "and benchmark here: trace your script first (File → Trace Script…).")
        if trace.recovered_spec is not None:
            return None
        why = next((note.removeprefix("no pipeline spec: ") for note in trace.notes
                    if note.startswith("no pipeline spec: ")), None)
        return (f"Continue as a Pipeline is off: fp16studio could not tell from "
                f"{script_name(trace.script)} which model and data to run without the script"
                + (f" ({why})." if why else ".") + " Its findings and their code fixes stay "
                "here; fix the script itself and trace it again.")

    @property
    def fixes_enabled(self) -> bool:
        """The findings shown are of the current spec (a run's, or the drift's): one click fixes
        them, and nothing else can be fixed. (The controller also keeps them off while a job
        runs.)"""
        return self.trace is None and self.tracing is None and (self.run_current or self.drift_current)

    def findings_shown(self) -> list:
        """What the Findings panel lists: nothing while a script is traced (what the slot holds
        is not the script's); the trace's alone while one is shown; else the drift's while it is
        of the current spec, after the findings' unless a current drift stands beside findings
        that are not a current run (those give way to it)."""
        if self.tracing is not None:
            return []
        if self.trace is not None:
            return list(self.trace.findings)
        drift = list(self.drift.value.findings) if self.drift_current else []
        if self.findings is None or drift and not self.run_current:
            return drift
        return list(self.findings.diagnosis.findings) + drift

    def findings_notice(self) -> str | None:
        """What the Findings panel says over what it lists when that is not a run of the
        current spec: a trace under way, findings of another version of the spec, or a saved
        session's. None: what is listed is current (or there is nothing to say it of)."""
        if self.tracing is not None:
            return (f"Tracing {self.tracing}: its findings will be listed here when it ends. Those "
                    "of the pipeline in the form are back if you cancel it.")
        findings = self.findings
        if findings is None or findings.origin == TRACE or self.drift_current and not self.run_current:
            return None   # nothing, a trace (of no spec), or a current drift's findings alone
        if self.stale:
            return ("These findings are of another version of the spec (an edit, Undo or Redo "
                    "changed it since they were made): Run to see the current one's. Their fixes "
                    "are off until then.")
        if findings.origin == SAVED:
            return "Findings saved with this session: Run to refresh them and to apply their fixes."
        if findings.doc.get("script"):   # a trace continued as this pipeline: found in the script
            return (f"These findings are from the trace of {script_name(findings.doc['script'])}, "
                    "at its lines: their fixes edit this pipeline. Run to see the pipeline's own.")
        return None

    @property
    def traced_script(self) -> str | None:
        """The script whose trace is under way or shown (its name), or None."""
        if self.tracing is not None:
            return self.tracing
        return script_name(self.trace.script) if self.trace is not None else None

    def form_notice(self) -> str | None:
        """What the Pipeline form says over itself while a script's trace is under way or shown:
        the tree and findings are the script's, but the form, Run, Benchmark, Compare and Export
        are still the pipeline's from before it. None: they agree."""
        script = self.traced_script
        if script is None:
            return None
        notice = (f"The tree and findings are the trace of {script}. This form is still the pipeline "
                  "from before it: Run, Benchmark, Compare and Export act on it.")
        if self.trace is not None:
            notice += " " + (self.why_not_continue or
                             "Continue as a Pipeline makes the script's pipeline this form's.")
        return notice

    def tree_notice(self) -> str | None:
        """What the Tensors tab says under its tree when the tree is not of the current spec."""
        if self.tracing is not None and self.tree_index is not None:
            return f"Tracing {self.tracing}: this tree is the last run's until its trace arrives."
        if self.stale and self.tree_index is not None:
            return "This tree is of another version of the spec: Run to see the current one's."
        return None

    def plan_fix(self, fix_id: str) -> FixPlan | None:
        """The fix with this id and the spec it was found for, which is the current spec: the
        current drift's (compared again), else the current run's (diagnosed again). None when
        no finding of the current spec offers it: a stale finding's fix is never applied, not
        to the spec it was found for (that would drop the edits made since) nor to this one
        (it was not found there)."""
        if not self.fixes_enabled:
            return None
        if self.drift_current:
            fix = _find_fix(self.drift.value.findings, fix_id)
            if fix is not None:
                return FixPlan(fix, self.drift.of, "drift")
        if self.run_current:
            fix = _find_fix(self.findings.diagnosis.findings, fix_id)
            if fix is not None:
                return FixPlan(fix, self.findings.of, "diagnose")
        return None

    def why_no_fix(self, fix_id: str) -> str:
        """Why `plan_fix(fix_id)` is None, in a sentence."""
        if self.tracing is not None or self.trace is not None:
            return f"No fix {fix_id!r} to apply: a script's trace is shown, its fixes are code."
        if self.findings is not None and not self.run_current and not self.drift_current:
            return (f"Fix {fix_id!r} not applied: the findings shown are of another version of "
                    "the spec. Run to see the current one's.")
        return f"No fix {fix_id!r} in the last diagnosis."

    def saved_findings(self) -> dict | None:
        """The findings saved with the spec: a trace that is not the pipeline is not its own.
        Findings of another version of the spec are saved too: their document says which spec
        was run, so they open stale."""
        return None if self.trace is not None else self.diagnosis_doc

    def saved_bench(self) -> dict | None:
        """The figures saved with the spec: only the current spec's (a bench document does not
        say which spec it measured, so stale figures would open as current)."""
        return None if self.bench_stale or self.bench is None else self.bench.value.to_json()

    def missing(self) -> str | None:
        """Why the current spec cannot run yet (a blank pipeline has no model), or None."""
        return NO_MODEL if self.spec is not None and not self.spec.model else None

    def title(self, dirty: bool) -> str:
        """The session's name, and the traced script's while its trace is what is shown."""
        name = self.path.name if self.path else (self.spec.model if self.spec else "")
        name = f"{name}{' •' if dirty else ''}" if name else ""
        if self.traced_script is not None:
            name = " · ".join(filter(None, (f"{self.traced_script} (trace)", name)))
        return f"{name} — fp16studio" if name else "fp16studio"

    # -- results arriving -----------------------------------------------------------------------
    def trace_started(self, script):
        """A trace of `script` (a path or demo:NAME) is under way: its findings will replace the
        slot's, which are not the script's and are not listed meanwhile."""
        self.tracing = script_name(script)

    def trace_ended(self) -> bool:
        """The trace ended without a result (cancelled): the slot's findings are back. True
        when one was under way."""
        was, self.tracing = self.tracing is not None, None
        return was

    def took_diagnosis(self, spec: PipelineSpec | None, diagnosis, tree_index=None, gpu_memory=None,
                       doc: dict | None = None):
        """A run of `spec`, or (`spec` None) a trace of a user's script; `doc`: its --json
        document when `arrived` made it already."""
        located = tree_index.locate(diagnosis.findings) if tree_index is not None else {}
        with self.events.blocker():
            self.findings = Findings(diagnosis, spec, TRACE if spec is None else RUN,
                                     diagnosis.to_json() if doc is None else doc, tree_index,
                                     located, gpu_memory)
            self.tracing = None
            self.device = diagnosis.device

    def diagnosis_failed(self):
        """The last findings and tree are of another attempt: cleared, not shown as current."""
        with self.events.blocker():
            self.findings = self.tracing = None

    def continue_trace(self) -> PipelineSpec | None:
        """Adopt the spec recovered from the trace shown as a fresh start (no file, no figures,
        no other result: those were of the pipeline before); the trace's tree and findings
        stay, as a run of that spec. None: nothing to continue."""
        trace = self.trace
        if trace is None or trace.recovered_spec is None:
            return None
        kept, spec = self.findings, trace.recovered_spec
        with self.events.blocker():
            self.start(spec)
            self.findings = replace(kept, of=spec, origin=RUN, doc=trace.to_json())
            self.device = trace.device
        return spec

    def took_drift(self, spec: PipelineSpec, result):
        with self.events.blocker():
            self.drift, self.device = Slot(result, spec), result.device

    def drift_failed(self):
        self.drift = None

    def took_fp8(self, spec: PipelineSpec, plan):
        with self.events.blocker():
            self.fp8, self.device = Slot(plan, spec), plan.device

    def fp8_failed(self):
        self.fp8 = None

    def bench_started(self):
        """A new benchmark replaces the figures: the old ones are not shown meanwhile."""
        self._bench_replaced, self.bench = self.bench, None

    def engine_lost(self):
        """A job ended with its engine (a box gone, a process that died): no result of it came,
        and none of what is shown was wrong, so every result stays, and the figures a
        benchmark under way had replaced come back (unless the model changed meanwhile)."""
        replaced, self._bench_replaced = self._bench_replaced, None
        if self.bench is None and replaced is not None and _model(replaced.of) == _model(self.spec):
            self.bench = replaced

    def took_bench(self, spec: PipelineSpec, result):
        self._bench_replaced = None
        with self.events.blocker():
            self.bench = Slot(result, spec)
            self.device = result.device or self.device

    def saved(self, path: Path):
        """The session was saved to `path`, its figures with it."""
        self.path, self._saved_bench = path, self.bench

    @property
    def bench_unsaved(self) -> bool:
        """Figures measured since the session was opened or saved: minutes of measuring that
        no file holds (closing asks first)."""
        return self.bench is not None and self.bench is not self._saved_bench

    # -- consent (CONTRACT §6) ------------------------------------------------------------------
    def consent(self, spec: PipelineSpec, ask: Callable[[str], bool], reading=None) -> Consent:
        """May `spec` run its code (its preprocess, the model's own code)? A spec read from a
        file asks (`ask(question)`) once per content of the spec and the code, remembered in the
        trust store; a spec with no code, or one made here (no file), runs freely. `reading`:
        that code as an engine on a box read it there (trust.CodeToRun: the file is the box's)."""
        from fp16studio.core.spec import trust

        path = self.path if self.path is not None and (
            reading is not None or self.path.is_file()) else None
        try:
            # The content asked about is the content the engine runs (trust.agreed): a file
            # swapped while the question is open, or before the run reads it, is refused.
            return Consent(*trust.consent(path, spec, ask, reading))
        except InputError as exc:   # the preprocess file is gone or unreadable: the run says so
            return Consent(True, note=str(exc))


def script_name(script) -> str:
    """A script as the window names it: its file name, or `demo:NAME`."""
    return str(script) if str(script).startswith("demo:") else PurePath(str(script)).name


def same_run(run: PipelineSpec, spec: PipelineSpec) -> bool:
    """`run` (the spec a saved diagnosis document says was run) is `spec`. Saving a session
    makes a spec's relative paths absolute when the file goes to another folder, and the
    document keeps them as they were run, so a relative path and an absolute one ending with
    it name the same thing; every other key must be equal."""
    ran, now = run.to_dict(), spec.to_dict()
    for key in ("model", "dataset", "preprocess"):
        if _same_path(ran[key], now[key]):
            ran[key] = now[key]
    return ran == now


def _same_path(a, b) -> bool:
    if a == b:
        return True
    if not a or not b:
        return False
    (a, _, fa), (b, _, fb) = (_split_function(a), _split_function(b))
    if fa != fb:
        return False
    pa, pb = PurePath(posixpath.normpath(a)), PurePath(posixpath.normpath(b))
    if pa.is_absolute() == pb.is_absolute():
        return pa == pb
    full, tail = (pa, pb) if pa.is_absolute() else (pb, pa)
    return ".." not in tail.parts and full.parts[-len(tail.parts):] == tail.parts


def _split_function(value: str):
    """'file.py:function' -> ('file.py', ':', 'function'); a path alone is kept whole."""
    head, sep, tail = value.rpartition(":")
    return (head, sep, tail) if sep and tail.isidentifier() else (value, "", "")


def _model(spec: PipelineSpec | None):
    return None if spec is None else (spec.model, spec.revision)


def _listed(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join(filter(None, (", ".join(words[:-1]), words[-1])))


def _find_fix(findings, fix_id: str):
    return next((fix for finding in findings for fix in finding.fixes if fix.id == fix_id), None)


# -- a saved session's results, read leniently ----------------------------------------------------
def read_saved(diagnosis_doc, bench_doc):
    """A saved session's findings (a Diagnosis) and benchmark (a BenchResult) as the window
    shows them, each None when there is none or it cannot be read (a crafted or damaged file,
    another kind of document, a finding of a newer version): a document is shown whole or
    not at all. The third value says what was left out and why, or is None."""
    from fp16studio.core.diagnostics.report import Diagnosis
    from fp16studio.core.precision.bench import BenchResult

    diagnosis, dropped = None, []
    if diagnosis_doc:
        try:
            diagnosis = Diagnosis.from_json(diagnosis_doc)
        except InputError as exc:   # the codec's one line, or its spec's
            dropped.append(f"findings ({exc})")
    bench = None
    if bench_doc:
        try:
            bench = BenchResult.from_json(bench_doc)
        except InputError as exc:
            dropped.append(f"benchmark ({exc})")
    return diagnosis, bench, " and ".join(dropped) or None
