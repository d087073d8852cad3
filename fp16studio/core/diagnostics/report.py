"""The result of one diagnosis, and its JSON document (CONTRACT §3, `diagnose --json`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..spec.value import PipelineSpec
from .findings import Finding, Fix
from .tree import TensorNode, summary


@dataclass
class Diagnosis:
    spec: PipelineSpec
    device: str
    findings: list[Finding] = field(default_factory=list)
    # The pipeline's own failure, if it failed: {"type", "message", "stage", "module"}.
    error: dict | None = None
    # The model's output as the forward pass returned it: {"name", "dtype", "shape"}.
    output: dict | None = None
    tree: TensorNode | None = None
    # Seconds per stage ("model", "dataset", "batch", "forward", "rules").
    timings: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    # CONTRACT inventory totals when known without walking the tree (a TreeIndex's, or a saved
    # document's); None: summarised from `tree`.
    inventory: dict | None = None
    # The training steps run after the forward pass (the spec's `train`; a trace's steps of
    # the script): Step.to_json documents, in order. Empty for inference only.
    steps: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings) and self.error is None

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    def fix(self, fix_id: str) -> Fix:
        for finding in self.findings:
            for fix in finding.fixes:
                if fix.id == fix_id:
                    return fix
        raise KeyError(fix_id)

    @classmethod
    def from_json(cls, doc: dict) -> "Diagnosis":
        """A Diagnosis from its `diagnose --json` document (a saved session's findings): every
        field but the tensor tree, which the document does not hold."""
        findings = [Finding.from_json(f) for f in doc.get("findings", ())]
        return cls(spec=PipelineSpec.from_dict(doc["spec"]), device=doc.get("device", ""),
                   findings=findings, error=doc.get("error"), output=doc.get("output"),
                   timings=doc.get("timings") or {}, environment=doc.get("environment") or {},
                   inventory=doc.get("inventory"), steps=list(doc.get("steps") or ()))

    def to_json(self) -> dict:
        inventory = self.inventory
        if inventory is None:
            inventory = summary(self.tree) if self.tree is not None else {
                "parameters": 0, "tensors": 0, "bytes": 0, "dtypes": {}, "devices": {}}
        return {
            "ok": self.ok,
            "spec": self.spec.to_dict(),
            "device": self.device,
            "findings": [f.to_json() for f in self.findings],
            "error": self.error,
            "inventory": inventory,
            "output": self.output,
            "timings": self.timings,
            "environment": self.environment,
            "steps": list(self.steps),
        }
