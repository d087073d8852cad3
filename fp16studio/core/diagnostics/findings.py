"""Findings and fixes: what a diagnosis says, and the spec edits that answer it (CONTRACT §2)."""

from __future__ import annotations

import linecache
import textwrap
from dataclasses import dataclass, field

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


@dataclass(frozen=True)
class CodeEdit:
    """A fix said in code, built by the rule that knows the facts: `text` to write instead of
    the user's line `source` ("replace"), right before it ("insert"), or where it fits ("add":
    no line known). Rendered once (`render`) for the window, a trace's `code` and the export."""

    text: str
    kind: str = "add"
    source: dict | None = None    # {"file", "line"} of the user's line, where known

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
class Fix:
    """One answer to a finding: a spec edit, the code that makes the same change in a script,
    and the line the exported script explains it with."""

    id: str
    title: str
    edits: dict
    # One sentence for the exported script's comment and the window's "what this changes" view.
    explain: str = ""
    code: CodeEdit | None = None

    def code_text(self) -> str:
        """What to write in a script: the code edit, else the explanation as a comment."""
        return self.code.render() if self.code is not None else f"# {self.explain or self.title}"

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "edits": dict(self.edits),
                "code": self.code_text()}

    @classmethod
    def from_json(cls, doc: dict) -> "Fix":
        """A fix read back from a document: its code as it was rendered."""
        code = doc.get("code")
        return cls(doc["id"], doc["title"], doc.get("edits") or {}, doc.get("explain", ""),
                   CodeEdit(code) if isinstance(code, str) and code else None)


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    location: str
    message: str
    evidence: dict = field(default_factory=dict)
    fixes: tuple = ()
    # `fp16studio trace`: {"file", "line"} of the user's script line the finding points at.
    source: dict | None = None

    def __post_init__(self):
        assert self.code in CODES, self.code
        assert self.severity in SEVERITIES, self.severity

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "severity": self.severity,
            "location": self.location,
            "message": self.message,
            "evidence": self.evidence,
            "fixes": [fix.to_json() for fix in self.fixes],
        }

    @classmethod
    def from_json(cls, doc: dict) -> "Finding":
        """A finding read back from a document (a saved session): what it said, as it said it."""
        return cls(doc["code"], doc["severity"], doc.get("location", ""), doc.get("message", ""),
                   doc.get("evidence") or {},
                   tuple(Fix.from_json(x) for x in doc.get("fixes", ())), doc.get("source"))
