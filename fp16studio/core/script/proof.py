"""Fixes proven on the script (issue 40): before a quiet-value fix is offered first, it is
applied to a copy of the script, the copy is traced again, and the fix counts as proven only if
its line no longer loses values, the place where the values landed is now close to its float32
shadow (or much closer, where another line's rounding is what is left), and nothing new fails.
What could not be proven says why.

The copy lives in a folder of its own (the user's file is never written); its run imports the
script's own folder after the copy's (SCRIPT_HOME_ENV), so the modules beside the script are
found. All records' first fixes are tried in one run; where that run fails, each alone. A fix
that is not proven gives way to its next way of writing, for a few rounds.

Fixes proven together where their values land together are then each left out once, the one
further down the script first: a line whose loss, with the others' fixes in, no longer reaches
that place is not where the error was born (`sigma = sqrt(1 - abar)` after `alphas = 1 - betas`
rounded to 1.0) and its record goes. Lines that each lose part of it (a KL's `p` and `q` both
made 0) are kept.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..common.codec import Document
from ..common.errors import InputError
from ..diagnostics.findings import Finding

PROVE_ENV = "FP16STUDIO_PROVE"          # "0": this run is a proof's, it proves nothing itself
SCRIPT_HOME_ENV = "FP16STUDIO_SCRIPT_HOME"
ROUNDS = 3
PROVEN = "proven"
_started = time.perf_counter()


def proving() -> bool:
    return os.environ.get(PROVE_ENV) != "0"


def apply_edits(text: str, edits) -> str:
    """The script's text with each edit ((line, code), ...) in place of its line, at that
    line's indentation (a code of several lines keeps its own shape below the first)."""
    lines = text.splitlines(keepends=True)
    for number, code in sorted(edits, reverse=True):
        if not 0 < number <= len(lines):
            raise InputError(f"line {number} is not in the script ({len(lines)} lines)")
        old = lines[number - 1]
        indent = old[:len(old) - len(old.lstrip())]
        ending = "\n" if old.endswith("\n") else ""
        body = "\n".join(indent + part if part.strip() else part
                         for part in code.splitlines())
        lines[number - 1] = body + ending
    return "".join(lines)


def fixed_script(script: str | Path, findings, wanted: list[str]) -> tuple[str, list[dict]]:
    """The traced script's text with the fixes asked for applied (`ID`: every finding's fix of
    that id; `ID:LINE`: the one at that line), and what was applied; InputError for a fix that
    is not there or has no code in the script. A "replace" edit takes its lines' place, an
    "insert" goes in right before its line, which stays."""
    script = Path(script)

    def in_script(fix) -> bool:
        return (fix.code is not None and fix.code.kind in ("replace", "insert") and
                bool(fix.code.source) and
                Path(fix.code.source.get("file") or "").resolve() == script.resolve())

    blocks, applied = {}, []
    for ask in wanted:
        fix_id, _, line = ask.partition(":")
        usable = [(f, x) for f in findings for x in f.fixes if x.id == fix_id and in_script(x)
                  and (not line or (f.source or {}).get("line") == _int(line))]
        if not usable:
            offered = sorted({f"{x.id}:{(f.source or {}).get('line')}" for f in findings
                              for x in f.fixes if in_script(x) and f.source})
            raise InputError(f"--apply {ask}: no such fix with code in {script.name}" +
                             (f" (offered: {', '.join(offered)})" if offered else
                              " (this trace offers none)"))
        for finding, fix in usable:
            source, kind = fix.code.source, fix.code.kind
            # An insert keeps its line: its place is the gap before it (first > last).
            first = source["line"]
            last = source.get("end_line", first) if kind == "replace" else first - 1
            if (first, last) not in blocks:
                blocks[(first, last)] = fix.code.render()
                applied.append({"id": fix.id, "line": first, "code": finding.code})
    lines = script.read_text().splitlines(keepends=True)
    for (first, last), block in sorted(blocks.items(), reverse=True):
        lines[first - 1:last] = [block + "\n"]
    return "".join(lines), applied


@dataclass(frozen=True)
class FixedCopy(Document):
    """A copy of a traced script with fixes in it, written beside the script: where, and the
    fixes applied ({"id", "line", "code"} each)."""

    path: str
    applied: list[dict]


def write_fixed_copy(script: str, findings: list[Finding], ask: str) -> FixedCopy:
    """The fix `ask` (`ID:LINE`) written into a copy beside the script under a name no file has
    (`train.fixed.py`, else `train.fixed-2.py`...): the script itself is never written. Run
    where the script is (the engine on a box writes there)."""
    text, applied = fixed_script(script, findings, [ask])
    path = free_name(Path(script))
    path.write_text(text)
    return FixedCopy(str(path), applied)


def free_name(script: Path) -> Path:
    """`train.fixed.py` beside `train.py`, else `train.fixed-2.py`...: a name no file has."""
    stem = script.stem.split(".fixed")[0]
    for index in range(1, 1000):
        path = script.with_name(f"{stem}.fixed{'' if index == 1 else f'-{index}'}.py")
        if not path.exists():
            return path
    raise InputError(f"no free name for a fixed copy beside {script}")


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def prove(records: list, user, error=None, args=None) -> list:
    """The records with `proof` (per candidate tried: PROVEN or "not proven: why") and their
    candidates in the order to offer them: the proven one first. `error`: how the script
    itself failed, if it did (the fixed copy may fail the same way)."""
    if not proving():
        return records
    import sys

    script = Path(user.script)
    args = list(sys.argv[1:] if args is None else args)
    budget = 30.0 + 3 * (time.perf_counter() - _started)
    tried = [0] * len(records)
    verdicts: list[list[str]] = [[] for _ in records]
    for i, record in enumerate(records):
        if (_place(record.source) or ("",))[0] != str(script.resolve()):
            # its fix would be written into a module the copy imports unchanged
            verdicts[i].append(f"not proven: only the traced script's own lines are tried on "
                               f"a copy, and this one is in {Path(record.source['file']).name}")
            tried[i] = len(record.candidates)
    proven: dict[int, tuple] = {}
    for _ in range(ROUNDS):
        trying = [i for i, r in enumerate(records)
                  if i not in proven and tried[i] < len(r.candidates)]
        if not trying:
            break
        outcome = _run(script, args, _edits(records, proven, trying, tried), budget)
        failed = outcome.result is None or outcome.result.error is not None and error is None
        groups = [[i] for i in trying] if failed and len(trying) > 1 else [trying]
        for group in groups:
            rerun = outcome if len(groups) == 1 else \
                _run(script, args, _edits(records, proven, group, tried), budget)
            for i in group:
                why = _judge(rerun, records[i], error)
                verdicts[i].append(why)
                if why == PROVEN:
                    proven[i] = records[i].candidates[tried[i]]
                tried[i] += 1
    unneeded = _unneeded(records, proven, script, args, budget, error)
    out = []
    for i, record in enumerate(records):
        if i in unneeded:
            continue
        order = list(record.candidates)
        if i in proven:
            order.remove(proven[i])
            order.insert(0, proven[i])
        out.append(dataclasses.replace(record, candidates=tuple(order),
                                       proof=_in_order(record.candidates, order, verdicts[i])))
    return out


def _in_order(candidates, order, verdicts) -> tuple:
    """The verdicts by the candidates' new order (untried: empty)."""
    by = {c: v for c, v in zip(candidates, verdicts)}
    return tuple(by.get(c, "") for c in order)


def _unneeded(records, proven: dict, script: Path, args, budget: float, error) -> set:
    """The proven records whose values land where others' do and whose fix the others' make
    unneeded: with it left out, no loss reaches that place. One run per round, leaving out one
    record of each such place, downstream first; a place keeps at least one."""
    groups: dict = {}
    for i in proven:
        if records[i].landing is not None:
            groups.setdefault(_place(records[i].landing.source), []).append(i)
    groups = {key: sorted(group, key=lambda i: records[i].source["line"], reverse=True)
              for key, group in groups.items() if len(group) > 1}
    unneeded: set = set()
    for depth in range(max(map(len, groups.values()), default=1) - 1):
        out = {group[depth] for group in groups.values() if depth < len(group) - 1}
        kept = {i: c for i, c in proven.items() if i not in unneeded | out}
        rerun = _run(script, args, _edits(records, kept, (), ()), budget)
        result = rerun.result
        if result is None or result.error is not None and error is None:
            break
        landed = {rerun.place(f.evidence.get("landing")) for f in result.findings
                  if f.code == "precision-loss"}
        unneeded |= {i for i in out if _place(records[i].landing.source) not in landed}
    return unneeded


def _edits(records, proven: dict, trying, tried) -> list:
    """The proven fixes and the ones tried now, a line written by one fix only."""
    edits, taken = [], set()
    for i, candidate in [*proven.items(), *((i, records[i].candidates[tried[i]])
                                             for i in trying)]:
        lines = {line for line, _ in candidate}
        if lines & taken:
            continue
        taken |= lines
        edits.extend(candidate)
    return edits


@dataclass(frozen=True)
class _Rerun:
    """A proof's run of the fixed copy, and how to read its places as the script's: the
    copy has another name and, below a fix of several lines, other line numbers."""

    result: object        # the copy's ScriptTrace; None when it could not be traced
    copy: str = ""
    script: str = ""
    edits: tuple = ()

    def place(self, source) -> tuple | None:
        """(file, line) of a place in this run, in the script's own lines."""
        file, line = _place(source) or (None, None)
        if file is None or file != self.copy:
            return file and (file, line)
        shift = 0
        for number, code in sorted(self.edits):
            start, size = number + shift, max(1, len(code.splitlines()))
            if line < start:
                break
            if line < start + size:
                return self.script, number
            shift += size - 1
        return self.script, line - shift


def _place(source) -> tuple | None:
    if not source or not source.get("file") or not source.get("line"):
        return None
    return str(Path(source["file"]).resolve()), source["line"]


def _run(script: Path, args, edits, budget: float) -> _Rerun:
    from .trace import trace_script

    folder = tempfile.mkdtemp(prefix="fp16studio-proof-")
    saved = {k: os.environ.get(k) for k in (PROVE_ENV, SCRIPT_HOME_ENV)}
    try:
        copy = Path(folder) / script.name
        copy.write_text(apply_edits(script.read_text(), edits))
        os.environ[PROVE_ENV] = "0"
        os.environ[SCRIPT_HOME_ENV] = str(script.parent)
        result = trace_script(copy, args, timeout=budget, output=_discard)
        return _Rerun(result, str(copy.resolve()), str(script.resolve()), tuple(edits))
    except Exception:  # noqa: BLE001 - a proof that cannot run proves nothing, says so
        return _Rerun(None)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(folder, ignore_errors=True)


def _discard(stream, line):
    pass


def _better(before, after: dict) -> bool:
    """What the landing holds after the fix is much closer to float32 (no inf/NaN where there
    were some, or at most half the error): what is left there is another line's to fix (a
    cast upstream that rounds the inputs already), not this fix's."""
    if before.nonfinite:
        return not after.get("nonfinite")
    flipped = after.get("flipped", 0)
    return after.get("error", 0.0) <= before.error / 2 and flipped <= before.flipped / 2


def _judge(rerun: _Rerun, record, error) -> str:
    result, here = rerun.result, _place(record.source)
    if result is None:
        return "not proven: the fixed copy of the script could not be traced"
    if result.error is not None and (error is None or
                                     result.error.type != error.type):
        message = result.error.message.split("\n", 1)[0][:160]
        return f"not proven: the fixed script fails ({message})"
    landing = _place(record.landing.source) if record.landing else None
    for finding in result.findings:
        at = rerun.place(finding.source)
        if finding.code == "precision-loss" and at == here:
            return "not proven: the line still loses values in the fixed script"
        after = finding.evidence.get("landing") or {}
        if finding.code == "precision-loss" and landing is not None and \
                rerun.place(after) == landing and not _better(record.landing, after):
            return (f"not proven: what line {landing[1]} uses is still off from float32 in the "
                    "fixed script")
        if finding.severity == "error" and at == here:
            return f"not proven: the fixed line fails ({finding.code})"
    return PROVEN
