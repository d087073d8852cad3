"""Findings and fixes: what a diagnosis says, and the spec edits that answer it (CONTRACT §2)."""

from __future__ import annotations

import linecache
import textwrap
from dataclasses import dataclass, field
from typing import TypedDict

from ..common.codec import Document, meta

CODES = (
    "dtype-mismatch", "device-mismatch", "integer-cast", "map-cast-lost", "list-batch",
    "half-unsupported", "half-on-cpu", "overflow", "silent-upcast", "autocast-inactive",
    "mixed-precision-params", "out-of-memory", "device-unavailable",
    "label-dtype",
    "overflow-risk", "precision-drift",
    # what a training step and the user's own tensor code show (fp16studio trace)
    "grad-overflow", "grad-underflow", "optimizer-precision", "scaler-misuse", "precision-flag",
    "value-out-of-range",
    # the FP8 plan (fp16studio fp8) and a traced script's FP8 failures
    "fp8-unsupported", "fp8-shape", "fp8-sensitive",
    # values lost without an error (fp16studio trace)
    "precision-loss", "training-stalled",
    # the distributed engines' settings, and ranks that disagree (fp16studio trace --launch)
    "half-reduction", "distributed-precision", "rank-mismatch",
    # a device_map's blocks offloaded to the CPU or disk, float16 there
    "offload-half",
)
# Most severe first: the order findings are listed in, everywhere.
SEVERITIES = ("error", "warning", "info")


def severity_rank(severity: str) -> int:
    """0 for the most severe; an unknown severity (a document from elsewhere) ranks last."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def by_severity(findings) -> list:
    """Errors first, then warnings, then notes; the engine's order within a severity. Takes
    Finding objects or their JSON documents."""
    return sorted(findings, key=lambda f: severity_rank(f["severity"] if isinstance(f, dict)
                                                        else f.severity))


class SourceLine(TypedDict, total=False):
    """A line of the user's own script: where a finding, a step or an error points."""

    file: str | None
    line: int | None
    end_line: int | None    # a code edit over several lines: the last one it replaces


EDIT_KINDS = ("add", "replace", "insert")


@dataclass(frozen=True)
class CodeEdit(Document):
    """A fix said in code, built by the rule that knows the facts: `text` to write instead of
    the user's line `source` ("replace"), right before it ("insert"), or where it fits ("add":
    no line known). Rendered once (`render`) for the window, a trace's `code` and the export."""

    text: str
    kind: str = field(default="add", metadata=meta(enum=EDIT_KINDS))
    source: SourceLine | None = None    # the user's line, where known

    def render(self) -> str:
        """The text, indented as the user's line is (a multi-line snippet keeps its shape)."""
        indent = _indent_of(self.source) if self.kind in ("replace", "insert") else ""
        lines = textwrap.dedent(self.text).splitlines()
        return "\n".join(indent + line if line.strip() else line for line in lines)


def _indent_of(source: dict | None) -> str:
    if not source or not source.get("file") or not source.get("line"):
        return ""
    line = linecache.getline(source["file"], source["line"])
    return line[:len(line) - len(line.lstrip())]


@dataclass(frozen=True)
class Fix(Document):
    """One answer to a finding: a spec edit, the code that makes the same change in a script,
    and the line the exported script explains it with."""

    # The document's `code` is the text to write, rendered (CONTRACT §3); the edit it is
    # rendered from travels whole as `code_edit`, so a program can apply it.
    __json_computed__ = {"code": "code_text"}

    id: str
    title: str
    edits: dict
    # One sentence for the exported script's comment and the window's "what this changes" view.
    explain: str = ""
    code: CodeEdit | None = field(default=None, metadata=meta(key="code_edit"))

    def code_text(self) -> str:
        """What to write in a script: the code edit, else the explanation as a comment."""
        return self.code.render() if self.code is not None else f"# {self.explain or self.title}"



@dataclass(frozen=True)
class Finding(Document):
    code: str = field(metadata=meta(enum=CODES))
    severity: str = field(metadata=meta(enum=SEVERITIES))
    location: str
    message: str
    evidence: dict = field(default_factory=dict)
    fixes: tuple[Fix, ...] = ()
    # `fp16studio trace`: the user's script line the finding points at.
    source: SourceLine | None = None

    def __post_init__(self):
        assert self.code in CODES, self.code
        assert self.severity in SEVERITIES, self.severity
