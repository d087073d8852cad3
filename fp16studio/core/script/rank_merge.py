"""What every rank of a launched run wrote (core/script/rank_files.py), merged into one answer.

- Findings merged by code and location, each with the ranks it was made on ("on all 4 ranks",
  "rank 3 only").
- The first non-finite value: ordered by step, then phase (forward, backward, collective,
  optimizer), then rank. Gradients are measured after DDP's all-reduce, so a rank whose loss
  was finite and whose gradients turned non-finite in the step where another rank's loss did
  got them through the collective: its phase is "collective", from that rank.
- Ranks that disagree on a dtype, a device type or a precision setting (rank-mismatch).
- Each rank's status: ok, failed (its script raised), hung (still running a bound after another
  rank was over), timeout, stopped (ended by the launcher, or killed, before it could report),
  missing (never started); with its last step and the line it was at.

Plain JSON in, one ScriptTrace out: nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..common.codec import DecodeError, decode, meta
from ..diagnostics.findings import Finding
from ..diagnostics.report import RunError, StepRecord
from ..diagnostics.tree import TensorNode
from ..diagnostics.rules.distributed import rank_mismatch
from ..spec.value import PipelineSpec
from .rank_summary import (Disagreement, FirstFailed, FirstNonfinite, RankedFinding, RankRow,
                           RankSummary)
from .trace import ScriptTrace

PHASES = ("forward", "backward", "collective", "optimizer")


@dataclass
class RankRecord:
    rank: int
    document: dict | None      # the rank's trace document, final when `done`
    beat: dict | None          # its last heartbeat: pid, steps so far, the line it was at
    started: bool
    done: bool
    ended: float | None = None   # when its script was over (a clock shared by the ranks of a
    #                              machine: the files' own times)
    tree: dict | None = None     # its tensor tree (TensorNode.to_json), not in the document


@dataclass
class RankedTrace(ScriptTrace):
    """The merged trace of a launched run: the document of the first bad rank (else of the
    lowest), with every rank's findings merged and `ranks` (CONTRACT: trace --launch)."""

    findings: list[RankedFinding] = field(default_factory=list)   # each with its ranks
    ranks: RankSummary | None = None
    # rank -> its tensor tree, for the window's rank picker (`tree` is the chosen base rank's)
    rank_trees: dict[int, TensorNode] = field(default_factory=dict, metadata=meta(internal=True))

    @property
    def ok(self) -> bool:
        return super().ok and all(r.status == "ok" for r in
                                  (self.ranks.per_rank if self.ranks else ()))


def merged_trace(records: list[RankRecord], script: str, args, launch: str,
                 launcher_code: int | None, stopped: str | None, timeout, rank_wait,
                 over_before: set | None = None) -> RankedTrace:
    """`stopped`: "timeout" or "hung" when this side ended the run, None when the launcher
    ended; `over_before`: the ranks whose scripts were over when it was stopped."""
    over_before = {r.rank for r in records if r.done} if over_before is None else over_before
    rows = [_row(r, stopped, over_before, timeout, rank_wait) for r in records]
    _collective_phase(rows)
    rows = _collective_phase(rows)
    first = min((replace(row.first_nonfinite, rank=row.rank) for row in rows
                 if row.first_nonfinite), key=_order, default=None)
    failed = _first_failed(rows, records)
    base = next((r for r in records if first and r.rank == first.rank and r.document), None) \
        or next((r for r in records if failed and r.rank == failed.rank and r.document),
                None) or next((r for r in records if r.document), None)
    findings = _merged_findings(records)
    disagreements = _disagreements(records)
    for what, values, sources, argument in disagreements:
        findings.append(_ranked(rank_mismatch(what, values, sources, argument), sorted(values)))
    ranks = RankSummary(
        launch=launch, world_size=len(records), launcher_exit=launcher_code,
        ended=stopped or ("failed" if launcher_code or failed else "completed"),
        first_nonfinite=first, first_failed=_failure(failed),
        disagreements=[Disagreement(what, {str(k): v for k, v in values.items()})
                       for what, values, _, _ in disagreements],
        per_rank=rows)
    doc = base.document if base else None
    result = _from_document(doc, script, args) if doc else ScriptTrace(
        spec=PipelineSpec(model="script", dataset="script"), device="unknown", script=script,
        args=tuple(args))
    trees = {r.rank: _tree(r.tree) for r in records if r.tree}
    if base is not None:
        result.steps = _steps(base)
        result.tree = trees.get(base.rank)
        row = rows[records.index(base)]
        if row.status != "ok" and row.error:
            result.error = replace(row.error, rank=base.rank)
    elif failed is not None:
        result.error = replace(failed.error, rank=failed.rank)
    if not any(r.document for r in records):
        result.notes.append("no rank reported: the launcher ended before fp16studio's runner "
                            "started in any rank (its own output says why)")
    order = sorted(range(len(findings)), key=lambda i: _severity(findings[i]))
    return RankedTrace(**{**result.__dict__, "findings": [findings[i] for i in order]},
                       ranks=ranks, rank_trees={rank: tree for rank, tree in trees.items() if tree})


def _from_document(doc: dict, script: str, args) -> ScriptTrace:
    diagnosis = ScriptTrace.from_json(dict(doc, spec=doc.get("spec") or {
        "model": "script", "dataset": "script"}))
    return ScriptTrace(**{**diagnosis.__dict__, "script": script, "args": tuple(args),
                          "models": doc.get("models", []), "notes": list(doc.get("notes", ())),
                          "recovered": doc.get("spec") is not None})


def _tree(doc: dict) -> TensorNode | None:
    try:
        return TensorNode.from_json(doc)
    except DecodeError:   # written by another fp16studio (the launcher's Python's)
        return None


def _severity(finding: Finding) -> int:
    return {"error": 0, "warning": 1}.get(finding.severity, 2)


def _steps(record: RankRecord) -> list[StepRecord]:
    """The steps the rank followed: its last heartbeat's, when it says more than its document
    (a rank killed before its final document)."""
    written = _step_records((record.document or {}).get("steps"))
    beat = _step_records((record.beat or {}).get("steps"))
    return beat if len(beat) > len(written) else written


def _step_records(docs) -> list[StepRecord]:
    try:
        return decode(list[StepRecord], docs or [])
    except DecodeError:   # written by another fp16studio (the launcher's Python's)
        return []


def _row(record: RankRecord, stopped, over_before, timeout, rank_wait) -> RankRow:
    doc = record.document or {}
    steps = _steps(record)
    first = next((FirstNonfinite(s.index, s.first_nonfinite.phase, s.first_nonfinite.location,
                                 s.source) for s in steps if s.first_nonfinite), None)
    at = (record.beat or {}).get("at")
    last = steps[-1].index if steps else None
    inside = bool((record.beat or {}).get("in_step", True))
    ended_by_us = stopped is not None and record.rank not in over_before
    if not record.started:
        status, error = "missing", RunError("NotStarted", "the rank never started fp16studio's "
                                            "runner (the launcher's output says why)", "script",
                                            source=at)
    elif ended_by_us and stopped == "hung":
        status, error = "hung", RunError("Hung", (
            f"still running {rank_wait:g} s after another rank was over"
            + _where(last, inside, at)), "script", source=at)
    elif ended_by_us:
        status, error = "timeout", RunError("Timeout", (
            f"still running after {timeout:g} s (--timeout)" + _where(last, inside, at)),
            "script", source=at)
    elif not record.done:
        status, error = "stopped", RunError("Stopped", (
            "ended before its script was over (by the launcher, after another rank failed, "
            "or killed)" + _where(last, inside, at)), "script", source=at)
    elif doc.get("error"):
        status, error = "failed", _rank_error(doc["error"], at)
    else:
        status, error = "ok", None
    return RankRow(rank=record.rank, status=status, last_step=last, in_step=inside, at=at,
                   first_nonfinite=first, error=error,
                   findings=[f["code"] for f in doc.get("findings", ())],
                   pid=(record.beat or {}).get("pid"))


def _rank_error(doc: dict, at) -> RunError | None:
    """A rank's own error, as its document wrote it (by another fp16studio, perhaps: None
    where it does not read); at the line the rank was at when it says none."""
    try:
        error = RunError.from_json(doc)
    except DecodeError:
        return None
    return error if error.source is not None or "source" in doc else replace(
        error, stage="script", module=None, source=at)


def _where(step, inside: bool, at) -> str:
    """Where a rank was: in the step it opened (its backward pass began), or after the last
    one it closed; at the user's line."""
    said = f", {'in' if inside else 'after'} step {step}" if step is not None else ""
    if at:
        said += f", line {at['line']} of {at['file'].rsplit('/', 1)[-1]}"
    return said


def _order(first: FirstNonfinite) -> tuple:
    return first.step, PHASES.index(first.phase), first.rank


def _collective_phase(rows: list[RankRow]) -> list[RankRow]:
    """A backward's non-finite gradients on a rank whose loss was finite, in the step where
    another rank's loss was not, came through the gradient all-reduce from that rank."""
    out = []
    for row in rows:
        first = row.first_nonfinite
        source = None if first is None or first.phase != "backward" else next(
            (other for other in rows if other is not row and other.first_nonfinite
             and other.first_nonfinite.step == first.step
             and other.first_nonfinite.phase == "forward"), None)
        out.append(row if source is None else replace(row, first_nonfinite=replace(
            first, phase="collective", from_rank=source.rank)))
    return out


def _first_failed(rows: list[RankRow], records: list[RankRecord]) -> RankRow | None:
    """The rank whose script failed first (the others then fail in the collective it left),
    else the first that did not run to its end."""
    ended = {r.rank: r.ended if r.ended is not None else float("inf") for r in records}
    failed = sorted((r for r in rows if r.status == "failed" and r.error),
                    key=lambda r: ended[r.rank])
    return next(iter(failed), None) or next((r for r in rows if r.status != "ok" and r.error),
                                            None)


def _failure(row: RankRow | None) -> FirstFailed | None:
    if row is None:
        return None
    return FirstFailed(rank=row.rank, step=row.last_step, type=row.error.type,
                       message=row.error.message, source=row.error.source)


def _ranked(finding: Finding, ranks: list[int]) -> RankedFinding:
    return RankedFinding.from_json({**finding.to_json(full=True), "ranks": ranks})


def _merged_findings(records: list[RankRecord]) -> list[RankedFinding]:
    """The ranks' findings, one per code and location, each with the ranks it was made on."""
    merged: dict = {}
    for record in records:
        for doc in (record.document or {}).get("findings", ()):
            merged.setdefault((doc["code"], doc["location"]), (doc, []))[1].append(record.rank)
    return [RankedFinding.from_json({**doc, "ranks": ranks}) for doc, ranks in merged.values()]


def _facts(record: RankRecord) -> tuple[dict, dict]:
    """What ranks must agree on, each (value, source, argument): the precision settings the
    rank made, and what its traced tensors showed."""
    doc, beat = record.document or {}, record.beat or {}
    settings = {name: (s["value"], s.get("source"), tuple(s.get("argument") or ()) or None)
                for name, s in (beat.get("precision") or {}).items()}
    shown = {}
    tensors = sorted((doc.get("inventory") or {}).get("dtypes") or ())
    if tensors:
        shown["dtypes of the traced tensors"] = (", ".join(tensors), None, None)
    if doc.get("output"):
        shown["output dtype"] = (doc["output"]["dtype"], None, None)
    if doc.get("device") and doc["device"] != "unknown":
        shown["device type"] = (doc["device"].split(":")[0], None, None)
    return settings, shown


def _disagreements(records: list[RankRecord]) -> list[tuple]:
    """(what, {rank: value}, {rank: source}, argument) for each fact the ranks do not agree
    on: the settings first; what the tensors showed only where no setting explains it."""
    facts = {r.rank: _facts(r) for r in records}
    out = []
    for kind in (0, 1):
        if out:
            break
        names = list(dict.fromkeys(name for f in facts.values() for name in f[kind]))
        for name in names:
            seen = {rank: f[kind][name] for rank, f in facts.items() if name in f[kind]}
            if len({value for value, _, _ in seen.values()}) > 1:
                out.append((name, {rank: v for rank, (v, _, _) in seen.items()},
                            {rank: s for rank, (_, s, _) in seen.items()},
                            next((a for _, _, a in seen.values() if a), None)))
    return out
