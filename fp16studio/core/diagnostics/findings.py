"""Findings and fixes: what a diagnosis says, and the spec edits that answer it (CONTRACT §2)."""

from __future__ import annotations

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
    # values lost without an error (fp16studio trace, core/diagnostics/quiet_values.py)
    "precision-loss", "training-stalled",
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
class Fix:
    """One answer to a finding: a spec edit, plus the line the exported script explains it with."""

    id: str
    title: str
    edits: dict
    # One sentence for the exported script's comment and the window's "what this changes" view.
    explain: str = ""

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title, "edits": dict(self.edits)}


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
