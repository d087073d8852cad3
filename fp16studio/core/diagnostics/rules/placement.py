"""Where tensors live: device-mismatch, device-unavailable, out-of-memory."""

from __future__ import annotations

from ...common.precision import DEVICE_ERRORS
from ...hf.loading import is_oom, resolve_device
from ...spec.value import PipelineSpec
from ..findings import Finding
from . import edits
from .evidence import Evidence

OWNS = ("device-mismatch", "device-unavailable", "out-of-memory")


def rule_device_mismatch(ev: Evidence) -> list[Finding]:
    failed = ev.failed_call
    for call in ev.calls:
        if not call.param_devices:
            continue
        others = sorted({t.device for t in call.inputs} - set(call.param_devices))
        if not others:
            continue
        broke = call is failed
        if not broke and call.completed:
            continue  # the module moved its inputs itself (accelerate hooks do)
        return [_batch_not_moved(ev, call.name, {"inputs on": others,
                                                 "parameters on": list(call.param_devices)})]
    if not (ev.failed and DEVICE_ERRORS.search(ev.message)):
        return []
    module = ev.error.module or "model"
    params = sorted({d for c in ev.calls for d in c.param_devices})
    batch = sorted({f.device for f in ev.facts.values() if f.device})
    if params and batch and set(batch) <= set(params):
        return [_made_inside(ev, module, params)]
    return [_batch_not_moved(ev, module, {"error": ev.message, "batch on": batch,
                                          "parameters on": params})]


def _batch_not_moved(ev: Evidence, location: str, evidence: dict) -> Finding:
    return Finding(
        "device-mismatch", "error", location or "model",
        "Tensors meeting in one operation live on different devices: the batch was not moved to "
        "the device of the module that consumes it first. Move the inputs to the model's device.",
        evidence, (edits.inputs_to_model_device(ev.names, ev.sources.get("call")),))


def _made_inside(ev: Evidence, module: str, devices: list) -> Finding:
    """The batch and the weights share a device: the odd tensor was made during the forward."""
    return Finding(
        "device-mismatch", "error", module,
        f"The batch and the weights are on {', '.join(devices)}, yet an operation inside "
        f"{module} met a tensor on another device ({ev.message}): a tensor made during the "
        "forward pass (torch.arange, torch.zeros, torch.linspace ...) without device= lands on "
        "the default device. Make it on the device of the tensor it meets: device=x.device.",
        {"error": ev.message, "batch on": devices, "parameters on": devices},
        (edits.written("device-at-creation", "Make the tensor where its operand is",
                       "tensor = torch.zeros(shape, dtype=x.dtype, device=x.device)  "
                       "# device= at the line that makes it", None),))


def made_on_other_device(record) -> Finding:
    """A tensor the user's code made on one device meeting one on another (core/script/
    user_ops.py). `record`: func, device, other_device, like (the other operand's name), line,
    source (where it was made), failed_at, message, function."""
    return Finding(
        "device-mismatch", "error", record.function,
        f"torch.{record.func} at line {record.source['line']} made a tensor on "
        f"{record.device}, and at line {record.failed_at['line']} it met {record.like} on "
        f"{record.other_device} ({record.message}). The batch and the model are where they "
        f"should be: make this tensor on {record.like}'s device, device={record.like}.device.",
        {"error": record.message, "made by": record.func, "made on": record.device,
         "met": record.like, "met on": record.other_device, "made at": record.source,
         "failed at": record.failed_at},
        (edits.device_at_creation(record.line, record.func, record.like, record.source),),
        source=record.source)


def rule_input_device_unavailable(ev: Evidence) -> list[Finding]:
    name = ev.spec.input_device
    if name == "model" or resolve_device(ev.spec.replace(device=name)) is not None:
        return []
    return [Finding(
        "device-unavailable", "error", "input_device",
        f"The batch is moved to {name!r} (input_device), a device this machine does not have. "
        "Move the inputs to the model's device.",
        {"requested": name, "model device": ev.device_type},
        (edits.inputs_to_model_device(ev.names),))]


def device_unavailable(spec: PipelineSpec, available: list[str]) -> Finding:
    return Finding(
        "device-unavailable", "error", spec.device,
        f"The spec asks for device {spec.device!r}, which this machine does not have "
        f"(available: {', '.join(available)}).",
        {"requested": spec.device, "available": available}, (edits.device_auto(spec),))


def script_device_unavailable(available: list[str], source: dict | None) -> Finding:
    """A traced script that moved a model or tensor to a device this machine lacks."""
    return Finding(
        "device-unavailable", "error", "cuda",
        "The script moves a model or tensor to a device this machine does not have "
        f"(available: {', '.join(available)}). Pick the device at run time: CUDA when present, "
        "else the CPU.",
        {"available": available}, (edits.device_auto(),), source=source)


def rule_out_of_memory(ev: Evidence) -> list[Finding]:
    if not ev.failed or not is_oom(ev.exception):
        return []
    fixes = [edits.halve_batch(ev.spec)]
    if ev.spec.model_dtype in ("float32", "auto"):
        fixes.insert(0, edits.model_dtype(ev.low_precision(), ev.spec, names=ev.names))
    return [Finding(
        "out-of-memory", "error", ev.error.module or "model",
        f"The {ev.device_type} device ran out of memory during {ev.error.stage}. Half "
        "precision halves the weights; a smaller batch shrinks the activations.",
        {"error": ev.message, "batch_size": ev.spec.batch_size}, tuple(fixes))]
