"""Precision settings, watched where the script makes them (`precision-flag`, CONTRACT §2).

A watcher of the ScriptWatch (core/script/evidence.py): `install()`, `uninstall()`,
`findings()`. It wraps
- `TrainingArguments.__post_init__` (its subclasses too: trl's `SFTConfig` calls it): the `fp16` /
  `bf16` flags and the device the arguments chose, or the exception they raised;
- `accelerate.Accelerator.__init__`: `mixed_precision`, and what accelerate made of it
  (`native_amp`: whether it will autocast; a GradScaler) on this device. An Accelerator a
  library makes (the Trainer's own) is what the script's TrainingArguments turned into;
- Lightning's `Trainer.__init__` (`lightning` and `pytorch_lightning`, wrapped when the script
  imports them, core/script/library_calls.py): the `precision` asked for against the one the
  Trainer chose; Lightning 2.6 swaps "16-mixed" for "bf16-mixed" on a CPU (with a log line);
- `torch.autocast.__init__`: an autocast the script's own line made that is off, by
  `enabled=False` or because torch turned it off (a dtype this device's autocast lacks), with no
  autocast on around it. (Its `__enter__` is the Recorder's: core/script/recover.py.) An autocast
  naming a device this machine lacks is `autocast-inactive`'s (core/diagnostics/rules.py).

What these versions do, checked (transformers 5.24, accelerate 1.15, torch 2.13, CPU):
`TrainingArguments(bf16=True)` without a bf16 GPU raises `ValueError: Your setup doesn't support
bf16/gpu. You need to assign use_cpu if you want to train the model on CPU.` (trl #3616), and
with `use_cpu=True` trains under a CPU bfloat16 autocast. `TrainingArguments(fp16=True)` on a CPU
constructs, and the Trainer's Accelerator sets mixed_precision "fp16" with `native_amp` off: no
autocast, no GradScaler, no warning; the model trains in its own dtype (float32).
`Accelerator(mixed_precision="fp16")` on a CPU does the same; "bf16" autocasts on the CPU.

The settings are compared with what actually ran: the first traced forward pass of a model
(the ScriptWatch's snapshots) gives its compute dtypes.
"""

from __future__ import annotations

import re
import sys
import weakref
from pathlib import Path
from dataclasses import dataclass

from ..diagnostics.report import RunError
from ..diagnostics.findings import Finding
from ..diagnostics.rules import Evidence
from ..diagnostics.rules.flags import (
    accelerator_finding,
    arguments_finding,
    autocast_off_finding,
    trainer_finding,
)
from .library_calls import after_import, unwatch
from .tracer import Patches

_MIXED_ERRORS = re.compile(r"bf16|fp16|mixed precision|bfloat16|float16", re.I)


@dataclass
class Setting:
    """One precision setting the script made."""

    kind: str                             # "TrainingArguments", "Accelerator", "Trainer"
    cls: str                              # the class the script named (SFTConfig...)
    flags: dict                           # fp16/bf16/use_cpu, mixed_precision, or precision
    source: dict | None
    device: str | None = None             # the device type it chose
    error: str | None = None              # what it raised
    native_amp: bool | None = None        # accelerate's decision: autocast on this device
    scaler: bool | None = None
    ref: object = None                    # weakref to the arguments / accelerator


@dataclass
class _AutocastOff:
    source: dict | None
    device: str
    dtype: str
    by_user: bool                         # enabled=False in the script; else torch turned it off


class FlagWatch:
    """Watches the precision settings (see the module docstring)."""

    def __init__(self, user, watch=None):
        self.user = user
        self.watch = watch                # the ScriptWatch: its snapshots say what ran
        self.settings: list[Setting] = []
        self.autocasts_off: list[_AutocastOff] = []
        self._patches = Patches()
        self._skip = ()
        self._finders: list = []
        self.errors: list[str] = []       # fp16studio's own failures while watching

    # -- installing ---------------------------------------------------------------------------
    def install(self):
        import torch

        try:
            from transformers import training_args
        except ImportError:  # a transformers without it: nothing of it to watch
            training_args = None
        if training_args is not None:
            owner = training_args.TrainingArguments
            self._patches.set(owner, "__post_init__", self._training_arguments(owner.__post_init__))
        try:
            from accelerate import accelerator
        except ImportError:
            accelerator = None
        if accelerator is not None:
            owner = accelerator.Accelerator
            self._patches.set(owner, "__init__", self._accelerator(owner.__init__))
        autocast = torch.amp.autocast_mode.autocast
        self._skip = (str(Path(torch.__file__).parent) + "/",)
        self._patches.set(autocast, "__init__", self._autocast_init(autocast.__init__))
        self._finders = [after_import(name, self._wrap_trainer, self.errors)
                         for name in ("lightning", "pytorch_lightning")]

    def uninstall(self):
        for finder in self._finders:
            unwatch(finder)
        self._patches.undo()


    # -- wrappers -------------------------------------------------------------------------------
    def _training_arguments(self, original):
        flags = self

        def __post_init__(args):
            # The innermost line of the script's own on the stack: the TrainingArguments(...)
            # call, or the SFTConfig(...) one whose __post_init__ calls this one.
            source = flags.user.frame_source(sys._getframe(1))
            try:
                original(args)
            except Exception as exc:
                if source is not None and _asks_half(args):
                    flags.settings.append(_arguments_setting(args, source, error=str(exc)))
                raise
            if source is not None and _asks_half(args):
                flags.settings.append(_arguments_setting(args, source))

        return __post_init__

    def _accelerator(self, original):
        flags = self

        def __init__(acc, *args, **kwargs):
            direct = flags.user.caller_is_user(2)
            try:
                original(acc, *args, **kwargs)
            except Exception as exc:
                asked = kwargs.get("mixed_precision", args[2] if len(args) > 2 else None)
                if direct is not None and asked not in (None, "no") and _MIXED_ERRORS.search(str(exc)):
                    flags.settings.append(Setting("Accelerator", type(acc).__name__,
                                                  {"mixed_precision": str(asked)}, direct,
                                                  error=str(exc)))
                raise
            flags._accelerator_made(acc, direct)

        return __init__

    def _accelerator_made(self, acc, direct):
        mixed = str(getattr(acc, "mixed_precision", "no") or "no")
        device = getattr(getattr(acc, "device", None), "type", None)
        native, scaler = bool(getattr(acc, "native_amp", False)), acc.scaler is not None
        if direct is not None:
            if mixed != "no":
                self.settings.append(Setting("Accelerator", type(acc).__name__,
                                             {"mixed_precision": mixed}, direct, device=device,
                                             native_amp=native, scaler=scaler, ref=weakref.ref(acc)))
            return
        # Made by a library (the Trainer): what the script's last TrainingArguments became.
        made = next((s for s in reversed(self.settings)
                     if s.kind == "TrainingArguments" and s.error is None), None)
        if made is not None:
            made.native_amp, made.scaler = native, scaler

    def _wrap_trainer(self, package):
        import importlib

        owner = importlib.import_module(f"{package.__name__}.trainer.trainer"
                                        if package.__name__ == "pytorch_lightning"
                                        else f"{package.__name__}.pytorch.trainer.trainer").Trainer
        self._patches.set(owner, "__init__", self._trainer(owner.__init__))

    def _trainer(self, original):
        flags = self

        def __init__(trainer, *args, **kwargs):
            source = flags.user.caller_is_user(2)
            original(trainer, *args, **kwargs)
            asked = kwargs.get("precision")
            chose = str(getattr(trainer, "precision", ""))
            if source is not None and asked is not None and _precision_kind(asked) != \
                    _precision_kind(chose):
                flags.settings.append(Setting(
                    "Trainer", type(trainer).__name__,
                    {"precision": str(asked), "chose": chose,
                     "library": type(trainer).__module__.split(".")[0]}, source,
                    device=type(getattr(trainer, "accelerator", None)).__name__
                    .replace("Accelerator", "").lower() or None, ref=weakref.ref(trainer)))

        return __init__

    def _autocast_init(self, original):
        flags = self

        def __init__(autocast, device_type, dtype=None, enabled=True, *args, **kwargs):
            original(autocast, device_type, dtype, enabled, *args, **kwargs)
            # Made right where it is entered (`with torch.autocast(...)`): an autocast already
            # on around it means the script does use mixed precision, and turns it off here.
            if autocast._enabled or not _device_present(device_type):
                return
            import torch

            if torch.is_autocast_enabled(device_type):
                return
            source = flags.user.caller_is_user(2, skip=flags._skip)
            if source is not None:
                flags.autocasts_off.append(_AutocastOff(
                    source, device_type, str(autocast.fast_dtype).replace("torch.", ""),
                    by_user=not enabled))

        return __init__

    # -- findings -------------------------------------------------------------------------------
    def findings(self, error: RunError | None = None) -> list[Finding]:
        ran = self._ran()
        out = []
        for setting in self.settings:
            finding = (arguments_finding(setting, ran, _cuda()) if setting.kind == "TrainingArguments"
                       else trainer_finding(setting) if setting.kind == "Trainer"
                       else accelerator_finding(setting, ran))
            if finding is not None:
                out.append(finding)
        out.extend(self._autocast_findings())
        return out

    def _snapshots(self) -> list:
        return list(getattr(self.watch, "snapshots", None) or ())

    def _ran(self) -> dict | None:
        """The compute dtypes of the first traced forward pass, if a model ran."""
        snaps = self._snapshots()
        if not snaps:
            return None
        snap = snaps[0]
        evidence = Evidence(spec=snap.observed.spec, device_type=snap.device.split(":")[0],
                            param_dtypes=snap.param_dtypes, module_param_dtypes={},
                            calls=snap.trace.calls)
        return evidence.compute_dtypes() or None

    def _autocast_findings(self) -> list[Finding]:
        out = []
        for snap in self._snapshots():
            entered = snap.trace.autocast
            if entered is None or entered.dtype is not None:
                continue
            off = next((a for a in self.autocasts_off if a.source == entered.source), None)
            halves = [f for f in snap.facts.values()
                      if f.final and f.final.startswith(("float16", "bfloat16"))]
            if off is None or set(snap.param_dtypes) - {"float32"} or halves:
                continue  # the script has half precision of its own: the autocast is a choice
            out.append(autocast_off_finding(off, snap.device.split(":")[0]))
        return out


# -- TrainingArguments ---------------------------------------------------------------------------

def _asks_half(args) -> bool:
    return any(getattr(args, name, False) for name in ("fp16", "bf16", "bf16_full_eval"))


def _arguments_setting(args, source, error: str | None = None) -> Setting:
    flags = {name: bool(getattr(args, name, False))
             for name in ("fp16", "bf16", "bf16_full_eval", "use_cpu")}
    device = None
    if error is None:
        try:
            device = args.device.type
        except Exception:  # noqa: BLE001 - a device it cannot set up: said by its own error
            device = None
    return Setting("TrainingArguments", type(args).__name__, flags, source, device=device,
                   error=error, ref=weakref.ref(args))


def _precision_kind(precision) -> str:
    """A Lightning precision's dtype: 16, "16-mixed" and "16-true" are float16's."""
    text = str(precision)
    return "bf16" if "bf16" in text else text.split("-")[0]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _device_present(device_type: str) -> bool:
    import torch

    module = getattr(torch, device_type, None) if device_type != "cpu" else None
    return device_type == "cpu" or bool(module is not None and module.is_available())


