"""Precision settings against the device and what ran: precision-flag (TrainingArguments'
fp16/bf16, Accelerator's mixed_precision, Lightning's Trainer precision, an autocast that is
off). The settings are watched
where the script makes them (core/script/flags.py); each fix rewrites the line that made the
setting (the finding's `source`)."""

from __future__ import annotations

import dataclasses
import re

from ...common.precision import cpu_has_native_bf16
from ..findings import CodeEdit, Finding, Fix
from .edits import replaced, source_line, with_argument
from .words import at_line

OWNS = ("precision-flag",)


def arguments_finding(s, ran: dict | None, cuda: bool) -> Finding | None:
    """TrainingArguments' fp16/bf16 against this device. `s`: a Setting (core/script/flags.py);
    `ran`: the compute dtypes of the first traced forward pass; `cuda`: a GPU is present."""
    return _at_setting(_arguments_finding(s, ran, cuda))


def accelerator_finding(s, ran: dict | None) -> Finding | None:
    """Accelerator's mixed_precision against this device and what ran."""
    return _at_setting(_accelerator_finding(s, ran))


def trainer_finding(s) -> Finding:
    """A Lightning Trainer that chose another precision than the one asked for (on a CPU,
    "bf16-mixed" for "16-mixed"). `s`: a Setting whose flags hold `precision` (asked), `chose`
    and `library`."""
    asked, chose, device = s.flags["precision"], s.flags["chose"], s.device or "this device"
    line = source_line(s.source)
    per_device = (f'"{asked}" if torch.cuda.is_available() else "{chose}"')
    code = (replaced(line, rf"""(["']){re.escape(asked)}\1|(?<=precision=){re.escape(asked)}\b""",
                     per_device)
            or f"trainer = {s.cls}(..., precision={per_device})")
    return _at_setting(Finding(
        "precision-flag", "warning", f"{s.cls}.precision",
        f"{s.flags['library']}'s {s.cls}(precision={asked!r}){at_line(s.source)} trains in "
        f"{chose!r} on {device}: Lightning swaps what this device cannot run for what it can, "
        "and only logs it. This run's numbers are not those of the precision the script asks "
        "for" + (" (bfloat16 has float32's range, so float16's overflows do not show here, and "
                 "3 bits less precision)" if "bf16" in chose and "bf16" not in asked else "")
        + ". Say the precision for each device, so the script asks for what runs.",
        {"setting": f"precision={asked!r}", "chose": chose, "device": device,
         "library": s.flags["library"]},
        (_line_fix("flag-trainer-precision-per-device",
                   f"{asked} on a GPU, {chose} on {device}", {}, code),),
        source=s.source))


def autocast_off_finding(off, device: str) -> Finding:
    """An autocast around the model that is off (by enabled=False, or by torch)."""
    return _at_setting(_autocast_off_finding(off, device))


def _line_fix(fix_id: str, title: str, edits: dict, code: str) -> Fix:
    return Fix(fix_id, title, edits, title, CodeEdit(code))


def _at_setting(finding: Finding | None) -> Finding | None:
    """The fixes' code placed at the setting's line: each replaces it."""
    if finding is None or finding.source is None:
        return finding
    fixes = tuple(dataclasses.replace(f, code=dataclasses.replace(f.code, kind="replace",
                                                                  source=finding.source))
                  for f in finding.fixes)
    return dataclasses.replace(finding, fixes=fixes)


def _arguments_finding(s, ran: dict | None, cuda: bool) -> Finding | None:
    line = source_line(s.source)
    if s.error is not None and "bf16" in s.error and (s.flags["bf16"] or s.flags["bf16_full_eval"]):
        name = "bf16" if s.flags["bf16"] else "bf16_full_eval"
        return _bf16_refused(s, name, line, cuda)
    if s.error is not None and "At most one of fp16 and bf16" in s.error:
        return Finding(
            "precision-flag", "error", f"{s.cls}.fp16",
            f"{s.cls}(fp16=True, bf16=True) raised: {s.error}. Pick one: bf16 where the device "
            "has it (same range as float32, no GradScaler), else fp16.",
            {"setting": "fp16=True, bf16=True", "error": s.error},
            (_line_fix("flag-one-half-dtype", "bf16 where supported, else fp16", {},
                 replaced(line, r"fp16\s*=\s*True\s*,?\s*", "")
                 or f"args = {s.cls}(..., bf16=torch.cuda.is_bf16_supported(), "
                    "fp16=not torch.cuda.is_bf16_supported())"),),
            source=s.source)
    if s.error is None and s.flags["fp16"] and s.device == "cpu":
        return _fp16_on_cpu(s, f"{s.cls}.fp16", "fp16=True", ran, line, cuda)
    return None


def _bf16_refused(s, name: str, line: str | None, cuda: bool) -> Finding:
    where = "this GPU has no bfloat16" if cuda else "this machine has no GPU"
    message = (f"{s.cls}({name}=True) raised {s.error!r}: transformers checks for a bfloat16 GPU "
               f"when the arguments are made, and {where}.")
    keep_cpu = with_argument(line, s.cls, "use_cpu=not torch.cuda.is_available()") \
        if line and "use_cpu" not in line else None
    use_cpu = _line_fix(
        "flag-bf16-use-cpu", "Keep bf16: train on the CPU when there is no GPU (use_cpu)", {},
        (keep_cpu or f"args = {s.cls}(..., {name}=True, use_cpu=not torch.cuda.is_available())")
        + "  # bf16 on a GPU, else a bfloat16 autocast on this CPU")
    only_gpu = _line_fix(
        "flag-bf16-if-supported", "bf16 only where the GPU has it (float32 elsewhere)", {},
        replaced(line, rf"\b{name}\s*=\s*True",
                  f"{name}=torch.cuda.is_available() and torch.cuda.is_bf16_supported()")
        or f"args = {s.cls}(..., {name}=torch.cuda.is_available() and "
           "torch.cuda.is_bf16_supported())")
    if cuda:   # a GPU without bfloat16 (a T4, a V100): float16 mixed precision is what it has
        fp16 = _line_fix("flag-fp16-instead", "fp16 mixed precision on this GPU (it has no bfloat16)", {},
                   replaced(line, rf"\b{name}\s*=\s*True",
                             f"{name}=torch.cuda.is_bf16_supported(), "
                             "fp16=not torch.cuda.is_bf16_supported()")
                   or f"args = {s.cls}(..., fp16=True)  # this GPU has no bfloat16")
        fixes = (fp16, only_gpu)
        message += " This GPU runs float16 mixed precision (fp16=True) instead."
    elif cpu_has_native_bf16():
        fixes = (use_cpu, only_gpu)
        message += (" This CPU computes bfloat16 natively (AVX512-BF16/AMX): with use_cpu=True "
                    "the Trainer trains under a CPU bfloat16 autocast.")
    else:
        fixes = (only_gpu, use_cpu)
        message += (" use_cpu=True would train under a CPU bfloat16 autocast, but this CPU has "
                    "no native bfloat16 (slower than float32): keep bf16 for the GPU.")
    return Finding("precision-flag", "error", f"{s.cls}.{name}", message,
                   {"setting": f"{name}=True", "device": "cuda" if cuda else "cpu",
                    "cpu bfloat16": cpu_has_native_bf16(), "error": s.error},
                   fixes, source=s.source)


def _fp16_on_cpu(s, location: str, setting: str, ran: dict | None, line: str | None,
                 cuda: bool) -> Finding:
    computed = ", ".join(ran) if ran else None
    dtype = computed or "the model's own dtype"
    message = (f"{setting} on a CPU runs no half precision: accelerate does float16 mixed "
               "precision only on an accelerator (on a CPU it turns native AMP off: no autocast, "
               "no GradScaler), and neither transformers nor accelerate says so. The model "
               f"trains in {dtype}" + (" (the first forward pass computed so)" if computed else "")
               + ": no speed or memory gain.")
    fixes = []
    if location.startswith("Accelerator"):
        bf16 = _line_fix("flag-accelerator-bf16-on-cpu", "bf16 on the CPU, fp16 on a GPU", {},
                   replaced(line, r"""(["'])fp16\1""",
                             '"fp16" if torch.cuda.is_available() else "bf16"')
                   or 'accelerator = Accelerator(mixed_precision="fp16" if torch.cuda.is_available() '
                      'else "bf16")')
        plain = _line_fix("flag-accelerator-fp16-gpu-only", "fp16 on a GPU, plainly float32 on the CPU",
                    {}, replaced(line, r"""(["'])fp16\1""",
                                  '"fp16" if torch.cuda.is_available() else "no"')
                    or 'accelerator = Accelerator(mixed_precision="fp16" if '
                       'torch.cuda.is_available() else "no")')
    else:
        extra = "" if line and "use_cpu" in line else ", use_cpu=not torch.cuda.is_available()"
        bf16 = _line_fix("flag-fp16-bf16-on-cpu", "bf16 on the CPU, fp16 on a GPU", {},
                   replaced(line, r"\bfp16\s*=\s*True",
                             "fp16=torch.cuda.is_available(), bf16=not torch.cuda.is_available()"
                             + extra)
                   or f"args = {s.cls}(..., fp16=torch.cuda.is_available(), "
                      f"bf16=not torch.cuda.is_available(){extra})")
        plain = _line_fix("flag-fp16-gpu-only", "fp16 on a GPU, plainly float32 on the CPU", {},
                    replaced(line, r"\bfp16\s*=\s*True", "fp16=torch.cuda.is_available()")
                    or f"args = {s.cls}(..., fp16=torch.cuda.is_available())")
    if cpu_has_native_bf16():
        fixes = [bf16, plain]
        message += " This CPU computes bfloat16 natively: bf16 mixed precision works here."
    else:
        fixes = [plain, bf16]
        message += " This CPU has no native bfloat16 either: float32 is its fastest."
    return Finding("precision-flag", "warning", location, message,
                   {"setting": setting, "device": "cpu", "autocast": False,
                    "grad scaler": bool(s.scaler), "compute dtypes": ran,
                    "cpu bfloat16": cpu_has_native_bf16()},
                   tuple(fixes), source=s.source)


# -- Accelerator ---------------------------------------------------------------------------------

def _accelerator_finding(s, ran: dict | None) -> Finding | None:
    mixed = s.flags["mixed_precision"]
    line = source_line(s.source)
    if s.error is not None:
        return Finding(
            "precision-flag", "error", f"{s.cls}.mixed_precision",
            f"{s.cls}(mixed_precision={mixed!r}) raised: {s.error}. This device cannot run that "
            "mixed precision: pick what it has (bf16 where supported, fp16 on a GPU without "
            "bfloat16, no on a device with neither).",
            {"setting": f"mixed_precision={mixed!r}", "error": s.error},
            (_line_fix("flag-accelerator-supported", "The mixed precision this device has", {},
                 replaced(line, rf"""(["']){re.escape(mixed)}\1""",
                           '"bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() '
                           'else "fp16" if torch.cuda.is_available() else "no"')
                 or 'accelerator = Accelerator(mixed_precision="bf16" if torch.cuda.is_available() '
                    'and torch.cuda.is_bf16_supported() else "fp16" if torch.cuda.is_available() '
                    'else "no")'),),
            source=s.source)
    if mixed == "fp16" and s.device == "cpu" and not s.native_amp:
        return _fp16_on_cpu(s, f"{s.cls}.mixed_precision", 'mixed_precision="fp16"', ran, line,
                            False)
    return None


# -- autocast ------------------------------------------------------------------------------------

def _autocast_off_finding(off, device: str) -> Finding:
    half = "bfloat16" if device == "cpu" else "float16"
    if off.by_user:
        severity = "info"
        message = (f"The autocast({off.device!r}) around the model is off (enabled=False), and "
                   "nothing else in the script is half precision: the forward pass runs in "
                   f"float32. If mixed precision was meant, enable it: on {device} "
                   f"autocast({half}) works" + (" (with a GradScaler for float16)."
                                                if half == "float16" else "."))
    else:
        severity = "warning"
        message = (f"torch turned the autocast({off.device!r}, {off.dtype}) around the model off: "
                   f"{off.device} autocast has no {off.dtype} (it warned once). The forward pass "
                   f"runs in float32. Ask for a dtype it has: {half}.")
    return Finding(
        "precision-flag", severity, "autocast.enabled", message,
        {"autocast device": off.device, "dtype": off.dtype, "enabled by the script": not off.by_user,
         "model device": device},
        (_line_fix(f"flag-autocast-{half}", f"Autocast in {half} on {device}", {},
             f'with torch.autocast(device_type="{device}", dtype=torch.{half}):'
             + ("  # with torch.amp.GradScaler for training" if half == "float16" else "")),),
        source=off.source)
