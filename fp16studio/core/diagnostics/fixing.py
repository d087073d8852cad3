"""Applying fixes: a fix is an edit of the spec, so undo is just the previous spec."""

from __future__ import annotations

import dataclasses

from ..spec.value import PipelineSpec
from .findings import Fix
from .report import Diagnosis, FixRun

MAX_ROUNDS = 5


def apply_fix(spec: PipelineSpec, fix: Fix) -> PipelineSpec:
    """The spec with the fix's edits made, and the fix recorded in `applied_fixes` (the export
    comments each where it acts)."""
    record = {"id": fix.id, "title": fix.title, "edits": dict(fix.edits), "explain": fix.explain}
    return spec.replace(**merged_edits(spec, fix.edits),
                        applied_fixes=spec.applied_fixes + (record,))


# Spec keys whose value is an object of fields: a fix edits only the fields it names.
NESTED_KEYS = ("train",)


def merged_edits(spec: PipelineSpec, edits: dict) -> dict:
    """The edits with each nested object's fields merged into the spec's own (a fix that sets
    `train.grad_scaler` keeps the optimizer, lr and the rest); a fix that sets a nested key to
    null removes it."""
    out = dict(edits)
    for key in NESTED_KEYS:
        current, edit = getattr(spec, key), out.get(key)
        if isinstance(edit, dict) and current is not None:
            out[key] = {**current, **edit}
    return out


def fix_until_clean(spec: PipelineSpec, max_rounds: int = MAX_ROUNDS, progress=None,
                    cancel=None):
    """Apply the first fix of the first error finding and re-run, until no error remains.

    Returns (final Diagnosis, applied: [{"round", "code", "fix"}]) (the Python API's shape;
    `fix_run` is the same as one FixRun). A fix that leads back to a spec already tried is
    skipped for the next one, so the loop cannot cycle. The model stays loaded between rounds
    whose fix does not change what is loaded.
    """
    from ..run.warm import WarmModel

    warm = WarmModel()
    try:
        return _fix_loop(spec, max_rounds, progress, cancel, warm)
    finally:
        warm.clear()


def fix_run(spec: PipelineSpec, max_rounds: int = MAX_ROUNDS, progress=None,
            cancel=None) -> FixRun:
    """`fix_until_clean` as the `fix --json` document."""
    report, applied = fix_until_clean(spec, max_rounds, progress, cancel)
    fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(Diagnosis)}
    return FixRun(**fields, applied=applied)


def _fix_loop(spec, max_rounds, progress, cancel, warm):
    from .diagnosis import diagnose

    report = diagnose(spec, progress, cancel, warm)
    applied, seen = [], {_key(spec)}
    for round_no in range(1, max_rounds + 1):
        if report.ok:
            break
        step = _next_step(report, seen)
        if step is None:
            break
        finding, fix, new_spec = step
        seen.add(_key(new_spec))
        applied.append({"round": round_no, "code": finding.code, "fix": fix.id})
        report = diagnose(new_spec, progress, cancel, warm)
    return report, applied


def _next_step(report, seen):
    for finding in report.errors:
        for fix in finding.fixes:
            candidate = apply_fix(report.spec, fix)
            if _key(candidate) not in seen:
                return finding, fix, candidate
    return None


def _key(spec: PipelineSpec) -> str:
    data = spec.to_dict()
    data.pop("applied_fixes")
    return repr(sorted(data.items()))
