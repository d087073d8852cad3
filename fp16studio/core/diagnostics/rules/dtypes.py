"""Which dtype computes where: dtype-mismatch, silent-upcast, mixed-precision-params,
half-on-cpu, autocast-inactive, half-unsupported.

Each sentence about where a dtype came from is the provenance's own (words.py): the finding
that carries `from: cast` at a line says the cast at that line.
"""

from __future__ import annotations

import fnmatch

from ...common.dtypes import BYTES_PER_ELEMENT, HALF_NAMES
from ...common.island_code import islands_code
from ...common.precision import DTYPE_ERRORS, HALF_KERNEL_ERRORS
from ...run.trace import ModuleCall
from ...spec.value import PipelineSpec
from ..findings import Finding, Fix
from . import edits
from .edits import source_line
from .evidence import Evidence
from .offload import half_on_cpu_blocks
from .words import (
    autocast_origin,
    at_line,
    input_origin,
    model_origin,
    origin_first,
    origin_phrase,
    origin_story,
    unasked_half,
    with_origin,
)

OWNS = ("dtype-mismatch", "silent-upcast", "mixed-precision-params", "half-on-cpu",
        "autocast-inactive", "half-unsupported")

def rule_dtype_mismatch(ev: Evidence) -> list[Finding]:
    failed = ev.failed_call
    autocast = bool(ev.spec.autocast)
    silent = []
    for call in ev.calls:
        param = call.param_dtype
        floats = [t for t in call.inputs if t.floating]
        wrong = [t for t in floats if param and t.dtype != param]
        if not wrong or call.cls.endswith(("Embedding", "EmbeddingBag")):
            # An embedding's input is indices: a floating one is integer-cast's story.
            continue
        if call is failed:
            producer = _kept_fp32_producer(ev, call, wrong[0].dtype)
            if producer is not None:
                return [_kept_fp32_finding(ev, producer, call, param)]
            return [_dtype_finding(ev, call, wrong[0].dtype, param, "error")]
        if not call.completed or autocast:
            continue
        handled = all(o.dtype == param for o in call.outputs if o.floating)
        if handled or ev.explained_fp32(call.name):
            continue  # the module casts its inputs itself (ViT, CLIP), or is fp32 on purpose
        silent.append((call, wrong[0].dtype, param))
    if ev.failed and failed is not None and DTYPE_ERRORS.search(ev.message):
        # The clash happened inside functional code of a module without its own parameters.
        param = _nearest_param_dtype(ev, failed.name)
        inputs = [t.dtype for t in failed.inputs if t.floating]
        return [_dtype_finding(ev, failed, inputs[0] if inputs else None, param, "error")]
    if silent:
        call, got, param = silent[0]
        return [_dtype_finding(ev, call, got, param, "warning", others=len(silent) - 1)]
    return []


def _kept_fp32_producer(ev: Evidence, consumer: ModuleCall, got: str) -> ModuleCall | None:
    """The module the user keeps in float32 whose float32 output the failing module received."""
    if got != "float32" or not ev.spec.keep_fp32:
        return None
    before = [c for c in ev.calls if c.completed and c.index < consumer.index
              and not consumer.name.startswith(c.name)]
    for call in sorted(before, key=lambda c: c.finished, reverse=True):
        if any(o.dtype == got for o in call.outputs) and call.param_dtype == "float32":
            return call if _user_kept(ev.spec, call.name) else None
    return None


def _user_kept(spec: PipelineSpec, module: str) -> list[str]:
    return [p for p in spec.keep_fp32 if fnmatch.fnmatchcase(module, p)]


def _kept_fp32_finding(ev: Evidence, producer: ModuleCall, consumer: ModuleCall,
                       param: str) -> Finding:
    s = ev.spec
    patterns = _user_kept(s, producer.name)
    rest = [p for p in s.keep_fp32 if p not in patterns]
    names = ", ".join(patterns)
    fixes = (
        Fix("run-in-float32", f"Run {names} in float32, outputs cast back to {param}",
            {"keep_fp32": rest, "run_in_float32": list(s.run_in_float32) + patterns},
            f"the modules stay float32 inside, their outputs go back to {param} for the next one",
            edits.CodeEdit(islands_code(list(s.run_in_float32) + patterns, param))),
        Fix("drop-keep-fp32", f"Stop keeping {names} in float32",
            {"keep_fp32": rest}, f"the modules run in {param} like the rest of the model",
            edits.CodeEdit(f"# remove the .float() of {names}: it runs in torch.{param} with the "
                           "rest")),
    )
    return Finding(
        "dtype-mismatch", "error", producer.name,
        f"{producer.name} ({producer.cls}) is kept in float32 by keep_fp32 ({names}), "
        f"so its output is float32, and the next module, {consumer.name} ({consumer.cls}), has "
        f"{param} weights. keep_fp32 keeps the weights, not the dtype between modules: run these "
        f"modules in float32 with their outputs cast back to {param}. Casting the batch changes "
        "nothing here.",
        with_origin({"input dtype": "float32", "parameter dtype": param,
                     "produced by": producer.name, "module class": consumer.cls,
                     "consumer": consumer.name, **({"error": ev.message} if ev.message else {})},
                    model_origin(ev, param)),
        fixes)


def _nearest_param_dtype(ev: Evidence, module: str) -> str | None:
    for name, dtype in ev.module_param_dtypes.items():
        if name.startswith(module):
            return dtype
    return None


def _dtype_finding(ev: Evidence, call: ModuleCall, got, param, severity, others=0) -> Finding:
    fixes = []
    origin = model_origin(ev, param)
    unasked = unasked_half(ev) if origin is not None else None
    names, at_call = ev.names, ev.sources.get("call")
    if param in HALF_NAMES and got not in HALF_NAMES:
        fixes = [edits.cast_inputs(ev.spec, param, names, at_call), edits.autocast(param, names),
                 edits.model_dtype("float32", ev.spec, names=ev.names)]
        story = (f"The model's weights are {param} but its input is {got}: cast the floating "
                 f"inputs to {param}.")
        if unasked is not None:
            fixes, story = origin_first(ev, fixes), origin_story(unasked)
        elif origin is not None:
            story += f" The weights are {param} because {origin_phrase(origin)}."
    elif param == "float32" and got in HALF_NAMES:
        fixes = [edits.model_dtype(got, ev.spec, (ev.provenance or {}).get("source"), ev.names),
                 edits.autocast(got, names), edits.drop_input_cast(ev.spec)]
        origin = input_origin(ev, got) or origin
        story = (f"The inputs are {got} but the model stayed float32: load the model in "
                 f"{got} too, or keep float32 weights and let autocast pick precisions.")
        if origin is not None and origin["dtype"] == got and origin["from"] != "default-dtype":
            story = f"The inputs are {got} because {origin_phrase(origin)}. " + story.split(": ", 1)[1]
        if origin is not None and origin["from"] == "default-dtype":
            # torch's default made them half, not the script's choice: undo that first.
            fixes = list(origin_first(ev, fixes, origin))
            story = (f"The inputs are {got} because torch.set_default_dtype(torch.{got})"
                     f"{at_line(origin.get('source'))} makes every new tensor {got}, but the "
                     "model is float32" + (
                         " (transformers 5 loads a checkpoint in its own dtype, whatever the "
                         "default)" if ev.provenance and ev.provenance["from"] == "checkpoint"
                         else "") + ". Keep torch's default float32.")
    elif param in HALF_NAMES and got in HALF_NAMES:
        fixes = [edits.cast_inputs(ev.spec, param, names, at_call)]
        story = f"The model runs in {param} but its input is {got}."
    else:
        story = "The input's dtype and the weights' dtype differ."
    where = f"Module {call.name or 'model'} ({call.cls})"
    more = f" ({others} more modules alike)" if others else ""
    return Finding(
        "dtype-mismatch", severity, call.name or "model",
        f"{where} received a {got} input but its parameters are {param}{more}. {story}",
        with_origin({"input dtype": got, "parameter dtype": param, "module class": call.cls,
                     **({"error": ev.message} if severity == "error" and ev.message else {})},
                    origin),
        tuple(f for f in fixes if f is not None))


def rule_half_unsupported(ev: Evidence) -> list[Finding]:
    match = HALF_KERNEL_ERRORS.search(ev.message) if ev.failed else None
    if not match:
        return []
    call = ev.failed_call
    module = (call.name if call else ev.error.module) or "model"
    half = match.group(1) or ev.half_requested() or "float16"
    half = "bfloat16" if half.lower() == "bfloat16" else "float16"
    # Autocast keeps half precision for the matmuls and runs ops without half kernels in fp32.
    fixes = (edits.autocast(half, ev.names),
             edits.model_dtype("float32", ev.spec, names=ev.names))
    origin = model_origin(ev, half) or input_origin(ev, half)
    if model_origin(ev, half) is not None:
        fixes = origin_first(ev, fixes)
    return [Finding(
        "half-unsupported", "error", module,
        f"An operator in {module} has no kernel for {half} on {ev.device_type} ({ev.message}). "
        "Keep float32 weights and run under autocast, which computes such operators in float32.",
        with_origin({"error": ev.message, "device": ev.device_type, "dtype": half}, origin),
        fixes)]


def user_half_unsupported(record) -> Finding:
    """A function of the user's own code that refuses a half dtype (core/script/user_ops.py):
    `.numpy()` on bfloat16, torch.quantile on float16. `record`: name (the function as shown),
    dtype, device, expr (the tensor's name), message, numpy, lineno, code (their line with the
    tensor cast to float32), source, location."""
    expr = record.expr
    if record.numpy:
        story = (f"{expr or 'The tensor'} is {record.dtype}, and numpy has no {record.dtype}: "
                 f"{record.name} refuses it ({record.message}). Cast that one tensor to float32 "
                 f"on its way to numpy; the model stays in {record.dtype}.")
        fix = edits.written("float-before-numpy", "Cast to float32 before .numpy()", record.code,
                            record.source)
    else:
        story = (f"{record.name} has no {record.dtype} support on {record.device} "
                 f"({record.message}). Cast its {record.dtype} input to float32 for this one "
                 f"call; the rest stays {record.dtype}.")
        fix = edits.written("float-input", f"Cast the input of {record.name} to float32",
                            record.code, record.source)
    return Finding(
        "half-unsupported", "error", record.location, f"At line {record.lineno}: {story}",
        {"error": record.message, "dtype": record.dtype, "operation": record.op,
         "device": record.device}, (fix,), source=record.source)


def rule_half_on_cpu(ev: Evidence) -> list[Finding]:
    if ev.device_type != "cpu" or half_on_cpu_blocks(ev):   # offload-half says it, per block
        return []
    # An autocast that names another device type does nothing here (autocast-inactive says so).
    autocast_fp16 = ev.spec.autocast == "float16" and ev.spec.autocast_device in (None, "cpu")
    weights_fp16 = ev.param_dtypes.get("float16", 0)
    fp16 = weights_fp16 or ev.compute_dtypes().get("float16", 0) or autocast_fp16
    if not fp16:
        return []
    fixes = [edits.model_dtype(d, ev.spec, names=ev.names) for d in ("bfloat16", "float32")]
    origin = model_origin(ev, "float16")
    if autocast_fp16 and not weights_fp16:
        fixes = [edits.autocast("bfloat16", ev.names, "cpu", ev.sources.get("autocast")),
                 edits.model_dtype("float32", ev.spec, names=ev.names)]
        origin = autocast_origin(ev, "float16")
        why = f"Its float16 comes from autocast(float16){at_line(origin['source'])}."
    else:
        why = f"The weights are float16 because {origin_phrase(origin)}." if origin else ""
        if origin is not None:
            fixes = list(origin_first(ev, fixes))
    return [Finding(
        "half-on-cpu", "warning", "model",
        "float16 compute on a CPU: most CPUs have no fast float16 path, so this runs slower than "
        "float32, and some operators have no float16 kernel at all. On CPU use bfloat16 (or "
        f"float32); keep float16 for the GPU. {why}".rstrip(),
        with_origin({"device": "cpu", "float16 parameters": weights_fp16}, origin),
        tuple(fixes))]


def rule_silent_upcast(ev: Evidence) -> list[Finding]:
    if ev.failed or ev.spec.autocast:
        return []
    compute = ev.compute_dtypes()
    decided = model_origin(ev, "float32")
    if (decided is not None and decided["from"] == "library" and decided.get("before")
            and compute.get("float32", 0) > sum(compute.values()) / 2):
        return [_library_upcast(ev, decided, compute)]   # a library call's decision
    half = ev.half_requested()
    if not half:
        return []
    # A cast asked for only inside map/preprocess and lost is map-cast-lost's story.
    s = ev.spec
    if half not in (s.model_dtype, s.model_cast, s.input_dtype, s.format_dtype):
        return []
    if not compute or compute.get("float32", 0) <= sum(compute.values()) / 2:
        return []
    upcast_at = next((c.name for c in ev.returned() if
                      any(t.dtype == half for t in c.inputs) and c.outputs and
                      all(o.dtype == "float32" for o in c.outputs if o.floating)), "model")
    return [Finding(
        "silent-upcast", "warning", upcast_at or "model",
        f"{half} was asked for, but the compute ran in float32: the model's weights are float32 "
        f"and it cast the {half} inputs up (or there were no floating inputs to cast). No speed "
        f"or memory gain. Load the model in {half}, or run under autocast.",
        with_origin({"asked": half, "compute dtypes": compute},
                    input_origin(ev, half) or model_origin(ev, half)),
        (edits.model_dtype(half, ev.spec, names=ev.names), edits.autocast(half, ev.names)))]


def rule_autocast_inactive(ev: Evidence) -> list[Finding]:
    dtype = ev.spec.autocast
    if not dtype:
        return []
    named = ev.spec.autocast_device
    if named and named != ev.device_type:  # known without the forward: said even when it failed
        return [Finding(
            "autocast-inactive", "warning", "model",
            f"autocast({named!r}, {dtype}) does nothing here: the model runs on {ev.device_type}, "
            f"and autocast only changes operations on the device type it names "
            "(torch.cuda.amp.autocast() is autocast('cuda')). Name the model's device type.",
            {"autocast device": named, "model device": ev.device_type, "autocast": dtype,
             "compute dtypes": ev.compute_dtypes()},
            (edits.autocast_on_device(ev.device_type, dtype, ev.names,
                                      ev.sources.get("autocast")),))]
    compute = ev.compute_dtypes()
    if ev.failed or not compute or compute.get(dtype, 0):
        return []
    alternative = "bfloat16" if dtype == "float16" else "float16"
    return [Finding(
        "autocast-inactive", "warning", "model",
        f"autocast({dtype}) is set but had no effect on {ev.device_type}: the compute ran in "
        f"{', '.join(compute)}. Autocast must use the device type the model runs on, and it is "
        "thread-local: enter it in the thread that runs the forward pass.",
        {"autocast": dtype, "device": ev.device_type, "compute dtypes": compute},
        (edits.autocast(alternative, ev.names),
         edits.model_dtype(dtype, ev.spec, names=ev.names)))]


def rule_mixed_precision_params(ev: Evidence) -> list[Finding]:
    if len(ev.param_dtypes) < 2:
        return []
    majority = max(ev.param_dtypes, key=ev.param_dtypes.get)
    odd = [name for name, dtype in ev.module_param_dtypes.items()
           if dtype != majority and not ev.explained_fp32(name)]
    if not odd:
        return []
    return [Finding(
        "mixed-precision-params", "warning", odd[0],
        f"The parameters hold several floating dtypes ({', '.join(ev.param_dtypes)}), and "
        f"{len(odd)} module(s) such as {odd[0]} are not {majority} for no reason the model or "
        "keep_fp32 gives. Load the model with one explicit dtype.",
        with_origin({"dtypes": dict(ev.param_dtypes), "modules": odd[:10]},
                    model_origin(ev, majority)),
        (edits.model_dtype(majority, ev.spec, names=ev.names),))]


def _library_upcast(ev: Evidence, p: dict, compute: dict) -> Finding:
    """A library call of the script's turned the half model it was given into float32."""
    half, dtype, call = p["before"], p["dtype"], p["call"]
    times = BYTES_PER_ELEMENT[dtype] // BYTES_PER_ELEMENT[half]
    line = source_line(p.get("source"))
    line = edits.without_comment(line) if line else f"{call}({ev.names.model})"
    leave_out = edits.written(
        "drop-library-upcast", f"Leave out {call}",
        f"# {line}  # left out: it made the {half} model {dtype}",
        p.get("source"), f"the model stays {half}, as it was loaded")
    return Finding(
        "silent-upcast", "warning", "model",
        f"{half} was asked for, but {origin_phrase(p)}: the compute ran in {dtype}, and the "
        f"weights take {times}x the memory. " + (f"{p['advice'][0].upper()}{p['advice'][1:]}."
                                                 if p.get("advice") else ""),
        with_origin({"asked": half, "compute dtypes": compute, "memory": f"x{times}"}, p),
        (leave_out, edits.autocast(half, ev.names)))


def recomputed_mismatch(failure) -> Finding | None:
    """The backward pass ran a module's forward again (a gradient checkpoint's recomputation)
    and it failed on dtypes where the forward pass itself had not: the recomputation ran
    without the autocast the forward ran under. `failure`: script.steps.BackwardFailure (the
    loss.backward() line, the module, its input and weight dtypes, the user's innermost line in
    the recomputation, the forward's autocast)."""
    if failure.module is None or not DTYPE_ERRORS.search(failure.message):
        return None
    got, param, autocast = failure.input_dtype, failure.param_dtype, failure.autocast
    name = failure.module or "model"
    where = f"{name} ({failure.cls})"
    forward_autocast = autocast is not None and autocast.dtype in HALF_NAMES
    without = (f"without the autocast({autocast.dtype}) its forward pass ran under"
               f"{at_line(autocast.source)}" if forward_autocast else "")
    fixes = []
    again = failure.recomputed_at
    if forward_autocast and again and again != failure.source:
        line = edits.without_comment(source_line(again) or "...")
        fixes.append(edits.written(
            "recompute-under-autocast", f"Recompute under the forward's autocast({autocast.dtype})",
            f'with torch.autocast(device_type="{autocast.device_type}", '
            f"dtype=torch.{autocast.dtype}):  # as the forward pass ran\n    {line}", again,
            "the recomputation runs in the dtypes the forward pass ran in"))
    fixes.append(Fix(
        "torch-checkpoint", "Checkpoint with torch.utils.checkpoint (use_reentrant=False)", {},
        "torch's checkpoint saves the forward's autocast and recomputes under it",
        edits.CodeEdit("from torch.utils.checkpoint import checkpoint\n"
                       "hidden = checkpoint(block, hidden, use_reentrant=False)  # recomputes "
                       "under the forward's autocast")))
    return Finding(
        "dtype-mismatch", "error", name,
        f"The backward pass{at_line(failure.source)} failed in {where}: a gradient checkpoint "
        f"recomputed its forward in the backward pass{at_line(again)} {without}".rstrip()
        + f", so its {got} input met its {param} weights ({failure.message}). The forward pass "
        "itself ran clean: recompute in the dtypes it ran in.",
        {"input dtype": got, "parameter dtype": param, "module class": failure.cls,
         "error": failure.message, "phase": "backward", "step": failure.step,
         "recomputed at": again,
         **({"provenance": {"dtype": autocast.dtype, "from": "autocast",
                            "source": autocast.source, "training": True}}
            if forward_autocast else {})},
        tuple(fixes), source=failure.source)
