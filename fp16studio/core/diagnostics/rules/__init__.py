"""One registry of rules: every finding fp16studio makes is made in this package (issue 27).

A family module owns its codes (`OWNS`): whatever observed the evidence (a forward pass, a
training step, the user's own tensor code, a precision setting, a drift run, the script's
failure), the finding of a code is worded and fixed by its owner, from the evidence it is given.
A code has exactly one owner (tests/core/test_rule_registry.py checks it, and that no module
outside this package constructs a Finding).

    batch       list-batch, map-cast-lost, integer-cast, label-dtype
    placement   device-mismatch, device-unavailable, out-of-memory
    dtypes      dtype-mismatch, silent-upcast, mixed-precision-params, half-on-cpu,
                autocast-inactive, half-unsupported
    ranges      overflow, overflow-risk, precision-drift, value-out-of-range
    values      precision-loss (values lost without an error at a line of the user's code)
    training    grad-overflow, grad-underflow, optimizer-precision, scaler-misuse,
                training-stalled
    flags       precision-flag
    fp8         fp8-unsupported, fp8-shape, fp8-sensitive
    distributed half-reduction, distributed-precision, rank-mismatch (trace --launch)
    offload     offload-half (device_map blocks offloaded to the CPU or disk, float16 there)

Beside them: `evidence` (what a forward pass shows the rules), `words` (where a dtype came
from, said from its provenance), `edits` (fixes as structured spec and code edits).

Each forward-pass rule is `(Evidence) -> list[Finding]`; RULES is their order. The rules of
other observers are plain functions of their records, called where the evidence is gathered.
"""

from __future__ import annotations

from ..findings import Finding, by_severity
from . import batch, distributed, dtypes, flags, fp8, offload, placement, ranges, training, values
from .evidence import Evidence
from .words import spec_provenance

FAMILIES = (batch, placement, dtypes, ranges, values, training, flags, fp8, distributed, offload)

RULES = (placement.rule_out_of_memory, placement.rule_input_device_unavailable,
         batch.rule_label_dtype, placement.rule_device_mismatch, batch.rule_list_batch,
         batch.rule_integer_cast, dtypes.rule_half_unsupported, dtypes.rule_dtype_mismatch,
         ranges.rule_overflow, batch.rule_map_cast_lost, dtypes.rule_silent_upcast,
         dtypes.rule_autocast_inactive, dtypes.rule_mixed_precision_params,
         offload.rule_offload_half, dtypes.rule_half_on_cpu, ranges.rule_overflow_risk)

__all__ = ["Evidence", "FAMILIES", "RULES", "findings_of", "owner", "run_rules", "spec_provenance"]


def owner(code: str):
    """The family module that words and fixes findings of `code`."""
    return next(family for family in FAMILIES if code in family.OWNS)


def run_rules(ev: Evidence) -> list[Finding]:
    """The findings of one forward pass, most severe first."""
    findings = []
    for rule in RULES:
        findings.extend(findings_of(rule, ev))
    return by_severity(findings)


def findings_of(rule, ev: Evidence) -> list[Finding]:
    """What `rule` finds in `ev`, each placed where `ev.place` says (a traced script's line)."""
    from dataclasses import replace

    found = rule(ev)
    return found if ev.place is None else [replace(f, source=ev.place(f)) for f in found]


def as_the_script_went(rule, record) -> Finding:
    """The finding `rule` makes of a failure in the user's own call, said as a warning where the
    script caught the exception and went on (`record.caught`): what the owner returns is final."""
    from dataclasses import replace

    finding = rule(record)
    if getattr(record, "caught", False):
        return replace(finding, severity="warning",
                       message=finding.message + " (The script caught this exception and went on.)")
    return finding
