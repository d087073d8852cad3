"""The window's session as plain Python: what it holds, and what follows from it.

A session is a spec, the file it came from, and one result slot per kind: the findings (a run
of the spec, a trace of a user's script, or what a saved session brought), the benchmark and the
drift from float32. Each slot holds the spec it is of. Whether the findings are stale, whether
their fixes are one click, which findings are shown and which spec a fix applies to all follow
from the slots; nothing of that is kept beside them. Whether a spec read from a file may run its
preprocess is decided here too (CONTRACT §6), with the question asked through a callable.

No Qt, no torch: fp16studio.gui.session_controller adapts this object to signals, the undo stack
and the worker, and tests/core/test_session_state.py drives it without a QApplication.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fp16studio.core import Fix, InputError, PipelineSpec

# Where the findings slot's result came from.
RUN = "run"        # a diagnosis of `of`: its fixes are edits of that spec
TRACE = "trace"    # a trace of a user's script, not (yet) the pipeline: of no spec, fixes are code
SAVED = "saved"    # a saved session's findings: of its spec, shown until a run, not fixed from

NO_MODEL = ("Choose a model first: type a Hub id or a local folder in the Model field, pick one "
            "from your Hugging Face cache, or drop a folder on it.")


@dataclass(frozen=True)
class Slot:
    """A result (a bench document, a DriftResult) and the spec it is of."""

    value: Any
    of: PipelineSpec | None


@dataclass(frozen=True)
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


def with_inventory(result):
    """(diagnosis, tree_index, gpu_memory) with the diagnosis's inventory summarised by core
    (`tree.summary`, what `diagnose --json` reports): one walk of the tree, done where the
    result arrives (the worker thread) rather than on the GUI thread."""
    diagnosis = result[0]
    if diagnosis.inventory is None and diagnosis.tree is not None:
        from fp16studio.core.diagnostics.tree import summary

        diagnosis.inventory = summary(diagnosis.tree)
    return result


class SessionState:
    def __init__(self):
        self.spec: PipelineSpec | None = None
        self.path: Path | None = None          # the spec or session file it was read from
        self.findings: Findings | None = None
        self.bench: Slot | None = None
        self.drift: Slot | None = None
        self.run_when_ready = False            # Run was asked for before there was a spec

    # -- adopting a spec ------------------------------------------------------------------------
    def start(self, spec: PipelineSpec, diagnosis_doc: dict | None = None,
              bench_doc: dict | None = None, path=None):
        """A freshly opened spec; a saved session's findings and figures are of it."""
        from fp16studio.core.diagnostics.report import Diagnosis

        self.spec, self.path = spec, Path(path) if path else None
        self.findings = Findings(Diagnosis.from_json(diagnosis_doc), spec, SAVED, diagnosis_doc) \
            if diagnosis_doc else None
        self.bench = Slot(bench_doc, spec) if bench_doc else None
        self.drift = None

    def set_spec(self, spec: PipelineSpec) -> bool:
        """Make `spec` current (an edit, an undo). True when the benchmark went with the old one:
        another model's figures are not this one's, so they are dropped, not shown as stale."""
        old, self.spec = self.spec, spec
        if self.bench is not None and old is not None and \
                (old.model, old.revision) != (spec.model, spec.revision):
            self.bench = None
            return True
        return False

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
    def bench_doc(self) -> dict | None:
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
    def fixes_enabled(self) -> bool:
        """The findings shown are of the current spec (a run's, or the drift's): one click fixes
        them. (The controller also keeps them off while a job runs.)"""
        return self.trace is None and (self.run_current or self.drift_current)

    @property
    def fixable(self) -> bool:
        """`plan_fix` has somewhere to look: a run's findings, or the current drift's."""
        return self.trace is None and (self.drift_current or
                                       self.findings is not None and self.findings.origin == RUN)

    def findings_shown(self) -> list:
        """What the Findings panel lists: the trace's alone while one is shown; else the drift's
        while it is of the current spec, after the findings' unless a current drift stands
        beside findings that are not a current run (those give way to it)."""
        if self.trace is not None:
            return list(self.trace.findings)
        drift = list(self.drift.value.findings) if self.drift_current else []
        if self.findings is None or drift and not self.run_current:
            return drift
        return list(self.findings.diagnosis.findings) + drift

    def plan_fix(self, fix_id: str) -> FixPlan | None:
        """The fix with this id and the spec it was found for: the current drift's (compared
        again), else the last run's (diagnosed again; the spec that was run, even if it changed
        since). None when no fixable finding offers it."""
        if self.trace is not None:
            return None
        if self.drift_current:
            fix = _find_fix(self.drift.value.findings, fix_id)
            if fix is not None:
                return FixPlan(fix, self.drift.of, "drift")
        if self.findings is not None and self.findings.origin == RUN:
            fix = _find_fix(self.findings.diagnosis.findings, fix_id)
            if fix is not None:
                return FixPlan(fix, self.findings.of, "diagnose")
        return None

    def saved_findings(self) -> dict | None:
        """The findings saved with the spec: a trace that is not the pipeline is not its own."""
        return None if self.trace is not None else self.diagnosis_doc

    def missing(self) -> str | None:
        """Why the current spec cannot run yet (a blank pipeline has no model), or None."""
        return NO_MODEL if self.spec is not None and not self.spec.model else None

    def title(self, dirty: bool) -> str:
        name = self.path.name if self.path else (self.spec.model if self.spec else "")
        return f"{name}{' •' if dirty else ''} — fp16studio" if name else "fp16studio"

    # -- results arriving -----------------------------------------------------------------------
    def took_diagnosis(self, spec: PipelineSpec | None, diagnosis, tree_index=None, gpu_memory=None):
        """A run of `spec`, or (`spec` None) a trace of a user's script."""
        located = tree_index.locate(diagnosis.findings) if tree_index is not None else {}
        self.findings = Findings(diagnosis, spec, TRACE if spec is None else RUN, diagnosis.to_json(),
                                 tree_index, located, gpu_memory)

    def diagnosis_failed(self):
        """The last findings and tree are of another attempt: cleared, not shown as current."""
        self.findings = None

    def continue_trace(self) -> PipelineSpec | None:
        """Adopt the spec recovered from the trace shown as a fresh start (no file, no figures);
        the trace's tree and findings stay, as a run of that spec. None: nothing to continue."""
        trace = self.trace
        if trace is None or trace.recovered_spec is None:
            return None
        kept, spec = self.findings, trace.recovered_spec
        self.start(spec)
        self.findings = replace(kept, of=spec, origin=RUN, doc=trace.to_json())
        return spec

    def took_drift(self, spec: PipelineSpec, result):
        self.drift = Slot(result, spec)

    def drift_failed(self):
        self.drift = None

    def bench_started(self):
        """A new benchmark replaces the figures: the old ones are not shown meanwhile."""
        self.bench = None

    def took_bench(self, spec: PipelineSpec, doc: dict):
        self.bench = Slot(doc, spec)

    # -- consent (CONTRACT §6) ------------------------------------------------------------------
    def consent(self, spec: PipelineSpec, ask: Callable[[str], bool]) -> Consent:
        """May `spec` run its code (its preprocess, the model's own code)? A spec read from a
        file asks (`ask(question)`) once per content of the spec and the code, remembered in the
        trust store; a spec with no code, or one made here (no file), runs freely."""
        from fp16studio.core.spec import trust

        if not trust.runs_code(spec) or self.path is None or not self.path.is_file():
            return Consent(True)
        try:
            question = trust.consent_needed(self.path, spec)
        except InputError as exc:   # the preprocess file is gone or unreadable: the run says so
            return Consent(True, note=str(exc))
        if question is None:
            return Consent(True)
        if ask(question):
            trust.trust(self.path, spec)
            return Consent(True, question)
        return Consent(False, question)


def _find_fix(findings, fix_id: str):
    return next((fix for finding in findings for fix in finding.fixes if fix.id == fix_id), None)
