"""From what a traced script did to a diagnosis: the same Evidence, rules and tree as a spec run.

Each model's first forward pass is snapshotted the moment it ends (the script may cast or
delete the model later): its parameters, the batch it got, the activations, the spec observed
so far. When the script is over, the rules read each snapshot, and each finding gets the line
of the user's code it is about (`source`).
"""

from __future__ import annotations

import contextlib
import os
import dataclasses
import re
from dataclasses import dataclass, field

from ..common import dtypes
from ..common.precision import DEVICE_MISSING_ERRORS, LIST_ERRORS
from ..data.columns import ColumnFacts
from ..diagnostics.report import ModelOutput, RunError
from ..diagnostics.diagnosis import (
    adapter_modules,
    describe_output,
    keep_in_fp32_modules,
    parameter_dtypes,
    environment_info,
)
from ..diagnostics.findings import Finding, by_severity
from ..diagnostics.inventory import (
    activations_tree,
    batch_tree,
    gradients_tree,
    mark,
    model_tree,
)
from ..diagnostics.rules import Evidence, findings_of, run_rules
from ..diagnostics.rules import fp8 as fp8_rules
from ..diagnostics.rules.batch import rule_list_batch
from ..diagnostics.rules.edits import NAMES, Names, names_at, source_line
from ..diagnostics.rules.placement import script_device_unavailable
from ..diagnostics.tree import TensorNode
from ..hf.offload import offloaded_blocks
from ..spec.value import PipelineSpec
from .recover import Observed, Recorder, observed_spec, reproduction, with_train
from .entry import DEFAULT_STEPS
from .distributed import DistributedWatch
from .flags import FlagWatch
from .steps import StepWatch
from .trace import ScriptTrace
from .tracer import ModelTrace, ScriptTracer, UserCode
from .user_ops import SHADOW_ENV, UserOps

# Batch keys that hold integers in every Hugging Face model: a floating one was cast.
# A list where the script expected a tensor: `.to(...)` / `.half()` on a batch of lists.
_LIST_METHODS = re.compile(r"attribute '(to|cuda|half|float)'")
_ID_NAMES = ("input_ids", "attention_mask", "token_type_ids", "position_ids", "labels",
             "decoder_input_ids", "decoder_attention_mask")
# Where a finding's source line is, by code, when neither its provenance nor the failing call
# says.
_SOURCE_OF = {"map-cast-lost": ("map",), "autocast-inactive": ("autocast",),
              "half-on-cpu": ("cast", "load"), "mixed-precision-params": ("cast", "load"),
              "list-batch": ("format", "dataset"), "silent-upcast": ("cast", "load"),
              "offload-half": ("cast", "load")}


@dataclass
class Snapshot:
    trace: ModelTrace
    device: str
    main_input: str
    batch_size: int | None
    facts: dict                           # batch key -> ColumnFacts
    param_dtypes: dict
    module_param_dtypes: dict
    keep_in_fp32: tuple
    adapters: tuple                       # diagnosis.adapter_modules
    tree: TensorNode
    output: ModelOutput | None
    name: str = ""                        # what from_pretrained loaded, else the class
    compiled: bool = False                # torch.compile's wrapper: its inside ran as one graph
    observed: Observed | None = None
    error: RunError | None = None         # the forward pass's failure, with its source line
    findings: list = field(default_factory=list)
    offloaded: dict = field(default_factory=dict)   # hf.offload.offloaded_blocks


class ScriptWatch:
    """Everything installed in the script's process: the spec recorder, the tracer, and the
    watchers of what happens around the forward pass. A watcher has `install()`,
    `uninstall()` and `findings()` (Findings with their `source` line, read once the script is
    over)."""

    def __init__(self, user: UserCode, steps: int = DEFAULT_STEPS):
        self.user = user
        self.recorder = Recorder(user)
        self.tracer = ScriptTracer(user, on_start=self._started, on_done=self._done)
        self.snapshots: list[Snapshot] = []
        self.steps = StepWatch(user, self.tracer, steps)
        self.watchers: list = [self.steps]
        self.on_snapshot = None            # called after each model's first pass is described
        # the user's own tensor operations, with the float32 shadow unless told not to
        self.watchers.append(UserOps(user, shadow=os.environ.get(SHADOW_ENV) != "0"))
        self.watchers.append(FlagWatch(user, self))   # precision settings, against what ran
        self.watchers.append(DistributedWatch(user, self))   # DDP, FSDP, DeepSpeed settings

    def install(self):
        self.recorder.install()
        self.tracer.install()
        for watcher in self.watchers:
            watcher.install()

    def uninstall(self):
        for watcher in reversed(self.watchers):
            watcher.uninstall()
        self.tracer.uninstall()
        self.recorder.uninstall()

    def _started(self, trace: ModelTrace, module):
        trace.autocast = self.recorder.current_autocast(module)

    def _done(self, trace: ModelTrace, module):
        snap = _snapshot(trace, module, self.recorder.maps)
        snap.observed = observed_spec(self.recorder, module, snap)
        load = self.recorder.load_of(module)
        snap.name = load.model if load else trace.cls
        snap.findings = _model_findings(snap, self.user)
        # Described: let the tensors go, and the traceback (it holds the script's frames).
        trace.inputs, trace.output, trace.exception = {}, None, None
        self.snapshots.append(snap)
        if self.on_snapshot is not None:
            self.on_snapshot()


def _snapshot(trace: ModelTrace, module, maps) -> Snapshot:
    import torch

    tensors = {k: v for k, v in trace.inputs.items() if torch.is_tensor(v)}
    lists = [k for k, v in trace.inputs.items() if isinstance(v, list)]
    intended, stored = {}, {}
    for call in maps:
        intended.update(call.intended)
        stored.update({k: v for k, v in call.stored.items() if v})
    facts = {}
    for key, tensor in tensors.items():
        final = dtypes.name_of(tensor.dtype)
        cast = trace.input_casts.get(key)
        before = cast.before if cast else final
        guess = "int64" if key in _ID_NAMES and dtypes.is_floating_name(final) else None
        facts[key] = ColumnFacts(key, role="label" if key == "labels" else None,
                                 stored=stored.get(key) or (before if cast else guess),
                                 intended=intended.get(key), loaded=before, final=final,
                                 device=str(tensor.device), shape=tuple(tensor.shape))
    for key in lists:
        facts[key] = ColumnFacts(key, loaded="list")
    main_input = getattr(module, "main_input_name", None) or next(iter(tensors), "input")
    first = tensors.get(main_input) if main_input in tensors else next(iter(tensors.values()), None)
    device = next((str(p.device) for p in module.parameters()), "cpu")
    tree = TensorNode(name="pipeline", path="", kind="group")
    tree.add(model_tree(module))
    if tensors:
        tree.add(batch_tree(tensors))
    if trace.calls:
        tree.add(activations_tree(trace.calls))
    output = describe_output(trace.output) if trace.exception is None and trace.output is not None \
        else None
    param_dtypes, module_param_dtypes = parameter_dtypes(module)
    return Snapshot(trace=trace, device=device, main_input=main_input,
                    batch_size=int(first.shape[0]) if first is not None and first.dim() else None,
                    facts=facts, param_dtypes=param_dtypes, module_param_dtypes=module_param_dtypes,
                    keep_in_fp32=tuple(keep_in_fp32_modules(module)),
                    adapters=tuple(adapter_modules(module)), tree=tree, output=output,
                    compiled=hasattr(module, "_orig_mod"), offloaded=offloaded_blocks(module))


def assemble(watch: ScriptWatch, script: str, args, outcome: dict, seconds: float,
             complete: bool = True) -> ScriptTrace:
    """The result of the run: findings per model, the script's own failure, what ran
    (`complete` False: so far, while the script goes on)."""
    findings = [f for snap in watch.snapshots for f in snap.findings]
    primary = next((s for s in watch.snapshots if s.error is not None),
                   watch.snapshots[0] if watch.snapshots else None)
    error = watch.steps.placed(outcome.get("error"))   # a backward's: at loss.backward()
    if primary is not None and primary.error is not None:
        error = primary.error
    elif error is not None and outcome.get("exception") is not None:
        names = names_at(source_line(primary.trace.source), bound=primary.trace.bound) \
            if primary is not None else NAMES
        findings.extend(_script_failure_findings(outcome["exception"], error, names))
    around = [f for watcher in watch.watchers for f in watcher.findings(error)]
    # A watcher's finding of the same code at the same line tells the same failure more
    # precisely (the user's own operation inside their forward, core/script/user_ops.py): at
    # its own line, or at the line where it failed (a tensor made elsewhere).
    said = {_at(f) for f in around if f.source} | {
        (f.code, f.evidence["failed at"].get("file"), f.evidence["failed at"].get("line"))
        for f in around if isinstance(f.evidence.get("failed at"), dict)}
    findings = _unique([f for f in findings if _at(f) not in said] + around)
    # The spec offered (part 5): the snapshot's own stays as observed, as this runs again.
    observed = primary.observed if primary is not None else None
    if observed is not None:
        observed = _checked_spec(watch, primary, findings, error, complete)
    notes = list(outcome.get("notes", ()))
    notes.extend(f"fp16studio failed to snapshot a model (a bug): {e}" for e in watch.tracer.errors)
    notes.extend(f"fp16studio's watch of the script's calls failed (a bug): {e}"
                 for e in watch.recorder.errors)
    notes.extend(f"fp16studio's watch of {type(w).__name__} failed (a bug): {e}"
                 for w in watch.watchers for e in getattr(w, "errors", ()))
    notes.extend(f"{s.name} is compiled (torch.compile): its modules ran as compiled code and "
                 "were not traced one by one; trace the script without torch.compile to see them"
                 for s in watch.snapshots if s.compiled)
    if not watch.snapshots:
        notes.append("no model ran a forward pass: nothing to diagnose")
    elif observed is not None and not observed.recovered:
        notes.append(f"no pipeline spec: {observed.why_not}")
    models = [{"name": s.name, "class": s.trace.cls, "calls": s.trace.count}
              for s in watch.snapshots]
    if primary is not None:
        first = watch.steps.steps[0] if watch.steps.steps else None
        primary.tree.children = [c for c in primary.tree.children if c.path != "gradients"]
        if first is not None and first.grads:
            primary.tree.add(gradients_tree(first.grads))
        mark(primary.tree, primary.findings + around)
    spec = observed.spec if observed is not None else PipelineSpec(model="script",
                                                                   dataset="script")
    return ScriptTrace(
        spec=spec, device=primary.device if primary else "cpu",
        findings=by_severity(findings), error=error,
        output=primary.output if primary else None, tree=primary.tree if primary else None,
        timings={"script": round(seconds, 4)}, environment=environment_info(),
        script=script, args=tuple(args), models=models,
        recovered=bool(observed and observed.recovered), notes=notes,
        steps=watch.steps.documents(), complete=complete)


def _checked_spec(watch: ScriptWatch, primary: Snapshot, findings: list, error,
                  complete: bool = True):
    """The primary model's observed spec with the script's training step (`train`), offered
    only when diagnosing it comes to the script's outcome (issue 20, part 5).

    Checking means running the spec, which costs what the script's first steps cost again, so
    it is checked only where there is something to reproduce: a finding or a failure (the
    spec is then what the user continues with to fix it). A clean script's spec is offered as
    recovered without a run: that keeps tracing a healthy script at its cost. A script that
    was interrupted (timeout, cancel) is not checked (the process must report within its
    grace period) and its spec is not offered; nor is a result so far (`complete` False),
    written while the script still runs."""
    observed = with_train(primary.observed, watch.steps.steps, watch.recorder.clips,
                          primary.param_dtypes)
    if not observed.recovered or (not findings and error is None):
        return observed
    if not complete:
        why = "the script did not end: its recovered spec could not be checked against it"
    elif error is not None and error.type == "KeyboardInterrupt":
        why = "the script was interrupted: its recovered spec could not be checked against it"
    else:
        # Findings of other models the script ran are not this spec's to reproduce.
        others = ({(f.code, f.location) for s in watch.snapshots if s is not primary
                   for f in s.findings} - {(f.code, f.location) for f in primary.findings})
        outcome = [f for f in findings if (f.code, f.location) not in others]
        with _interruptible():
            why = reproduction(observed.spec, outcome, error)
    return dataclasses.replace(observed, recovered=False, why_not=why) if why else observed


@contextlib.contextmanager
def _interruptible():
    """The parent's interrupt (its timeout) ends a check of the spec, not the result: the
    runner ignores SIGINT once the script is over; here it raises KeyboardInterrupt again."""
    import signal

    try:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread: nothing to change
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _model_findings(snap: Snapshot, user: UserCode) -> list[Finding]:
    trace = snap.trace
    exc = trace.exception if isinstance(trace.exception, Exception) else None
    error = RunError.raised(exc, "forward", trace.failed_module) if exc is not None else None
    # Read while the exception is still inside the model: its traceback holds the frames from
    # the model's call inwards (the user's own forward code, if any); else the calling line.
    failing = (user.traceback_source(exc.__traceback__) or trace.source) if exc is not None \
        else None
    if error is not None:
        snap.error = RunError(error.type, error.message, error.stage, error.module, failing)
    sources = dict(snap.observed.sources)
    if trace.source:
        sources["call"] = trace.source
    names = names_at(source_line(trace.source), bound=trace.bound)
    evidence = Evidence(
        spec=snap.observed.spec, device_type=snap.device.split(":")[0],
        param_dtypes=snap.param_dtypes, module_param_dtypes=snap.module_param_dtypes,
        keep_in_fp32=snap.keep_in_fp32, adapters=snap.adapters, facts=snap.facts,
        calls=trace.calls, error=error, exception=exc, provenance=snap.observed.provenance,
        input_provenance=snap.observed.input_provenance, sources=sources,
        names=names, offloaded=snap.offloaded,
        place=lambda finding: _source_for(finding, snap, failing))
    # An FP8 failure is an error of the failing line (where _source_for places any error).
    fp8 = fp8_rules.failure_findings(type(exc).__name__, str(exc), failing, names) \
        if exc is not None else []
    return fp8 or run_rules(evidence)


def _source_for(finding: Finding, snap: Snapshot, failing: dict | None) -> dict | None:
    casts = snap.trace.input_casts
    if finding.code in ("integer-cast", "dtype-mismatch"):
        cast = casts.get(finding.location) or next(iter(casts.values()), None)
        if cast is not None:
            return cast.source
    if finding.severity == "error" and failing is not None:
        return failing
    provenance = finding.evidence.get("provenance")
    if isinstance(provenance, dict) and provenance.get("source"):
        return provenance["source"]   # where the dtype the finding is about was decided
    for what in _SOURCE_OF.get(finding.code, ()):
        source = snap.observed.sources.get(what)
        if source is not None:
            return source
    return failing or snap.trace.source


def _script_failure_findings(exc: BaseException, error: RunError, names: Names) -> list[Finding]:
    """What the rules can say about a failure outside any model's forward pass (`names`: the
    user's, at the first model's call)."""
    message, source = error.message, error.source
    fp8 = fp8_rules.failure_findings(error.type, message, source, names)
    if fp8:
        return fp8
    if DEVICE_MISSING_ERRORS.search(message):
        import torch

        available = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        return [script_device_unavailable(available, source)]
    if LIST_ERRORS.search(message) and _LIST_METHODS.search(message):
        evidence = Evidence(spec=PipelineSpec(model="script", dataset="script", format="python"),
                            device_type="cpu", param_dtypes={}, module_param_dtypes={},
                            facts={"batch": ColumnFacts("batch", loaded="list")},
                            error=dataclasses.replace(error, stage="batch"), exception=exc,
                            place=lambda finding: source)
        return findings_of(rule_list_batch, evidence)
    return []


def _at(finding: Finding) -> tuple:
    source = finding.source or {}
    return finding.code, source.get("file"), source.get("line")


def _unique(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for finding in findings:
        key = (finding.code, finding.location)
        if key not in seen:
            seen.add(key)
            out.append(finding)
    return out
