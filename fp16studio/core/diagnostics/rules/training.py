"""Rules for training steps: what the backward pass, the optimizer and the GradScaler did.

Reads `Step` records (core/run/training.py) in order and says where a step first went wrong,
in plain words, with fixes best first. The first fix for half weights under an optimizer keeps
half precision where it works, in the forward pass: float32 master weights with autocast (and a
GradScaler for float16), not the whole model in float32.

A spec's run (`train`, CONTRACT §1) passes its `train`: the fixes then also edit it, each with
only the fields it changes (`apply_fix` merges them into the spec's `train`). A traced script
has none: its fixes are said in code.
"""

from __future__ import annotations

from ...common.dtypes import HALF_NAMES
from ...common.precision import UNSCALE_BF16_ERRORS, UNSCALE_FP16_ERRORS
from ...run.training import Step
from ..findings import Finding
from ..report import RunError
from . import edits, fp8
from .edits import NAMES, Names
from .ranges import loss_overflow

OWNS = ("grad-overflow", "grad-underflow", "optimizer-precision", "scaler-misuse",
        "training-stalled")

UNDERFLOW_SHARE = 0.01      # of a module's gradient below float16's normal range
ROUNDED_AWAY_SHARE = 0.5    # of the updates a step left unchanged
# A GradScaler that skipped every step and ended below this scale: its gradients are inf/NaN
# even scaled down, which no scale cures (a run warming up skips only while the scale is high).
STALLED_SCALE = 1.0


def training_findings(steps: list[Step], compute_dtype: str | None, train=None,
                      error: RunError | None = None, names: Names = NAMES) -> list[Finding]:
    """Findings over the followed steps. `compute_dtype`: the half dtype the forward ran in
    (the autocast's, else the weights'), None for float32. `train`: the spec's `train` when a
    spec ran the steps (its fixes then edit it). `error`: a step's failure (its RunError),
    when the loop stopped on one. `names`: the user's, as a script's lines say
    them (edits.names_at), for the fixes' code."""
    out: list[Finding] = []
    for step in steps:
        out.extend(_scaler_misuse(step, compute_dtype, train, names))
        broke = _first_nonfinite(step, steps, compute_dtype, train, names)
        if broke is not None:
            out.append(broke)
            break  # what follows a non-finite value is its consequence
    out.extend(_optimizer_risks(steps, out, train, names))
    if not any(f.code in ("overflow", "grad-overflow") for f in out):
        out.extend(_grad_underflow(steps, compute_dtype, train, names))  # else a consequence
    message = error.message if error else ""
    if UNSCALE_FP16_ERRORS.search(message):
        out.append(_scaler_refused(steps, error, train, "float16", names))
    elif UNSCALE_BF16_ERRORS.search(message):
        out = [f for f in out if f.code != "scaler-misuse"]   # the crash says more
        out.append(_scaler_refused(steps, error, train, "bfloat16", names))
    return _first_of_each(out)


def _first_of_each(findings: list[Finding]) -> list[Finding]:
    """One finding per code and location: the same misuse in every step is said once, at the
    first step it happened."""
    seen, out = set(), []
    for finding in findings:
        if (finding.code, finding.location) not in seen:
            seen.add((finding.code, finding.location))
            out.append(finding)
    return out


def _scaler_refused(steps: list[Step], error: RunError, train, dtype: str, names: Names) -> Finding:
    """The GradScaler failing on half gradients: the weights themselves are half. float16's
    answer is float32 master weights under autocast with the scaler; bfloat16 needs no scaler
    (on CUDA its unscale kernel has no bfloat16 at all)."""
    index = steps[-1].index if steps else 0
    if dtype == "float16":
        what = ("refused to unscale the gradients", "A GradScaler works on float32 weights "
                "(master weights) whose forward pass runs in float16 under autocast.")
        fixes = (edits.master_weights("float16", train, names),)
    else:
        what = ("failed to unscale bfloat16 gradients", "bfloat16 has float32's range and needs "
                "no loss scaling: drop the scaler (or keep float32 weights under a bfloat16 "
                "autocast, which needs none either).")
        fixes = (edits.drop_grad_scaler(train, names),
                 edits.master_weights("bfloat16", train, names))
    return Finding(
        "scaler-misuse", "error", "GradScaler.unscale_",
        f"Training step {index}: the GradScaler {what[0]} ({error.message}): the weights "
        f"themselves are {dtype}, so their gradients are too. {what[1]}",
        {"step": index, "phase": "optimizer", "error": error.message,
         "gradient dtype": dtype}, fixes, source=error.source)


def _first_nonfinite(step: Step, steps: list[Step], compute_dtype, train,
                     names: Names) -> Finding | None:
    where = step.first_nonfinite()
    if where is None:
        return None
    phase = where["phase"]
    if phase == "forward":
        return loss_overflow(step, compute_dtype, train, names)
    if phase == "backward":
        if step.scaled:
            return None  # the GradScaler skips this step and lowers its scale: its job
        grad = step.first_nonfinite_grad
        fixes = _gradient_fixes(grad.dtype, compute_dtype, train, names)
        return Finding(
            "grad-overflow", "error", grad.module or "model",
            f"Training step {step.index}: the loss was finite ({step.loss:.4g}) but the backward "
            f"pass produced inf/NaN gradients, first in {grad.module or 'the model'} (in backward "
            f"order; {grad.dtype}); {step.grad_nonfinite} modules' gradients are non-finite. The "
            "optimizer step that follows writes NaN into the weights.",
            {"step": step.index, "phase": "backward", "loss": step.loss,
             "gradient dtype": grad.dtype, "non-finite elements": grad.nonfinite,
             "modules non-finite": step.grad_nonfinite},
            fixes, source=step.source)
    opt = next(o for o in step.optimizers if o.broke)
    half = next((d for d in opt.param_dtypes if d in HALF_NAMES), None)
    return Finding(
        "optimizer-precision", "error", opt.broke,
        f"Training step {step.index}: {opt.cls}.step() turned finite weights into inf/NaN "
        f"(first {opt.broke}). It updates {half or 'the'} parameters directly"
        + (_eps_words(opt, half) if half else "") + ". The next forward pass is NaN.",
        _optimizer_evidence(step, opt),
        _optimizer_fixes(opt, half, train, names), source=opt.source)


def _eps_words(opt, half: str) -> str:
    held = opt.eps_in_dtype.get(half)
    if opt.eps is None or held is None or held >= opt.eps / 2:
        return ""
    return (f"; its eps={opt.eps:g} is {held:g} in {half}, so where the second moment "
            "underflows it divides by zero")


def _optimizer_evidence(step: Step, opt) -> dict:
    evidence = {"step": step.index, "phase": "optimizer", "optimizer": opt.cls,
                "parameter dtypes": opt.param_dtypes, "state dtypes": opt.state_dtypes}
    if opt.eps is not None:
        evidence["eps"] = opt.eps
        evidence["eps in dtype"] = opt.eps_in_dtype
    if opt.rounded_away:
        evidence["updates rounded away"] = {d: round(s, 4) for d, s in opt.rounded_away.items()}
    return evidence


def _optimizer_fixes(opt, half: str | None, train, names: Names) -> tuple:
    if half is None:
        return ()
    fixes = [edits.master_weights(half, train, names)]
    held = opt.eps_in_dtype.get(half)
    if opt.eps is not None and held is not None and held < opt.eps / 2:
        fixes.append(edits.optimizer_eps(opt.code, train, names))
    return tuple(fixes)


def _optimizer_risks(steps: list[Step], found: list[Finding], train,
                     names: Names) -> list[Finding]:
    """Half parameters updated directly, with no step broken (yet): eps the dtype rounds to
    zero, updates rounded away."""
    if any(f.code == "optimizer-precision" for f in found):
        return []
    for step in steps:
        for opt in step.optimizers:
            half = next((d for d in opt.param_dtypes if d in HALF_NAMES), None)
            if half is None:
                continue
            lost = opt.rounded_away.get(half, 0.0)
            eps = _eps_words(opt, half)
            if not eps and lost < ROUNDED_AWAY_SHARE:
                continue
            what = (f"{lost:.0%} of the updates of step {step.index} were smaller than the "
                    f"weights' resolution in {half} and were rounded away (the weights did not "
                    "move)" if lost >= ROUNDED_AWAY_SHARE else "")
            return [Finding(
                "optimizer-precision", "warning", f"{opt.cls} param_groups[0]",
                f"{opt.cls} updates {half} parameters directly, with no float32 master copy"
                + eps + (": " + what if what else "") + ".",
                _optimizer_evidence(step, opt), _optimizer_fixes(opt, half, train, names),
                source=opt.source)]
    return []


def _scaler_misuse(step: Step, compute_dtype, train, names: Names) -> list[Finding]:
    out = []
    events = [name for name, _ in step.scaler]
    for i, (name, source) in enumerate(step.scaler):
        if name == "clip" and "scale" in events[:i] and "unscale_" not in events[:i]:
            out.append(Finding(
                "scaler-misuse", "error", "clip_grad_norm_",
                f"Training step {step.index}: the gradients were clipped while still scaled by "
                f"the GradScaler (×{step.scale:g}): clipping sees a norm that many times too "
                "large and shrinks the gradients to almost nothing once they are unscaled; "
                "learning goes flat.",
                {"step": step.index, "calls": events, "scale": step.scale},
                (edits.unscale_before_clip(train, source, names),), source=source))
        if name == "step" and "scale" not in events[:i]:
            out.append(Finding(
                "scaler-misuse", "error", "GradScaler.step",
                f"Training step {step.index}: scaler.step(optimizer) ran on gradients the "
                "scaler never scaled (no scaler.scale(loss).backward()): it divides them by "
                f"the scale (×{step.scale or 65536:g}) and the update all but vanishes.",
                {"step": step.index, "calls": events}, (edits.grad_scaler(train, names),),
                source=source))
    if step.scaled and compute_dtype == "bfloat16" and step.index == 0:
        source = next((s for n, s in step.scaler if n == "scale"), step.source)
        out.append(Finding(
            "scaler-misuse", "warning", "GradScaler",
            "A GradScaler scales the loss of a bfloat16 run: bfloat16 has float32's range, so "
            "gradients neither overflow nor underflow the way float16's do; the scaler only "
            "adds work (and skips steps it need not skip).",
            {"step": step.index, "compute dtype": compute_dtype},
            (edits.drop_grad_scaler(train, names),),
            source=source))
    return out


def _grad_underflow(steps: list[Step], compute_dtype, train, names: Names) -> list[Finding]:
    for step in steps:
        for grad in step.grads:
            if grad.fp8_underflow is not None and grad.fp8_underflow >= UNDERFLOW_SHARE:
                return [_float8_underflow(step, grad, train)]
            if step.scaled:
                continue
            if grad.dtype == "float16" and grad.subnormal_share >= UNDERFLOW_SHARE:
                return [Finding(
                    "grad-underflow", "warning", grad.module or "model",
                    f"Training step {step.index}: {grad.subnormal_share:.1%} of the gradient of "
                    f"{grad.module or 'the model'} is below float16's normal range (6.1e-05): "
                    "those values keep few bits, and smaller ones are flushed to zero, where "
                    "float32 keeps them. Scale the loss so they survive.",
                    {"step": step.index, "phase": "backward", "gradient dtype": grad.dtype,
                     "subnormal share": round(grad.subnormal_share, 4),
                     "zero share": round(grad.zero / grad.numel, 4) if grad.numel else 0.0},
                    _gradient_fixes(grad.dtype, compute_dtype, train, names),
                    source=step.source)]
    return []


def _float8_underflow(step: Step, grad, train=None) -> Finding:
    """A layer converted to FP8 whose incoming gradient its backward cast flushes: the scale
    follows the gradient's abs-max, so a loss scale cannot help; the layer stays bfloat16
    (a spec's `train.fp8_keep`)."""
    module = grad.module or "model"
    return Finding(
        "grad-underflow", "warning", module,
        f"Training step {step.index}: {grad.fp8_underflow:.1%} of the gradient reaching "
        f"{module} falls under {grad.fp8_dtype}'s smallest step once torchao scales it for the "
        "layer's FP8 backward matmuls: those values are flushed to zero or keep a bit or two, "
        f"where {grad.dtype} keeps them. The scale follows the gradient's largest values, so "
        f"a loss scale cannot help; keep this layer out of FP8, in {grad.dtype}.",
        {"step": step.index, "phase": "backward", "gradient dtype": grad.dtype,
         "fp8 dtype": grad.fp8_dtype, "fp8 underflow share": round(grad.fp8_underflow, 4)},
        (fp8.keep_bf16_fix([module], train, dtype=grad.dtype),), source=step.source)


def _gradient_fixes(grad_dtype: str, compute_dtype: str | None, train, names: Names) -> tuple:
    """Half gradients are half weights: master weights first (a GradScaler refuses to unscale
    float16 gradients). float32 weights under a float16 autocast need only the scaler."""
    if grad_dtype in HALF_NAMES:
        return (edits.master_weights(grad_dtype, train, names),)
    return (edits.grad_scaler(train, names),) if compute_dtype == "float16" else ()


def training_stalled(steps, scalers, compute_dtype: str | None,
                     names: Names = NAMES) -> list[Finding]:
    """Training that quietly stopped: the same loss at every followed step with all-zero
    gradients; a loss that went NaN right after an optimizer step; a GradScaler that skipped
    every step of the script. `steps`: `Step` records; `scalers`: what each GradScaler did over
    the whole run (`updates`, `every_step_skipped`, `scale`, `source`)."""
    out = []
    done = [s for s in steps if s.done]
    losses = {s.loss for s in done}
    if len(done) >= 2 and len(losses) == 1 and None not in losses and all(
            s.finite and s.grads and all(g.zero == g.numel for g in s.grads) for s in done):
        (loss,) = losses
        fixes = (edits.grad_scaler(names=names),) \
            if compute_dtype == "float16" and not done[0].scaled \
            else ()
        out.append(Finding(
            "training-stalled", "error", "loss",
            f"Training does not move: the loss is {loss:.6g} at each of the {len(done)} steps "
            "followed and every gradient is exactly zero, so the optimizer changes nothing"
            + (" (float16 gradients this small flush to zero without a GradScaler)"
               if fixes else "") + ".",
            {"kind": "zero-gradients", "step": done[-1].index, "steps": len(done),
             "loss": loss}, fixes, source=done[0].source))
    for before, after in zip(steps, steps[1:]):
        # An update that wrote NaN into the weights is said already (optimizer-precision).
        if before.finite and before.optimizers and not after.finite and \
                not any(o.broke for o in before.optimizers):
            opt = before.optimizers[-1]
            half = next((d for d in opt.param_dtypes if d in HALF_NAMES), None)
            fixes = (edits.master_weights(half, names=names),) if half else (
                (edits.grad_scaler(names=names),) if compute_dtype == "float16" else ())
            out.append(Finding(
                "training-stalled", "error", "loss",
                f"The loss went {after.loss} at step {after.index}, right after the optimizer "
                f"step of step {before.index} (loss {before.loss:.4g}): that update made the "
                "weights produce inf/NaN, and every step after it learns nothing.",
                {"kind": "nan-after-step", "step": after.index, "after step": before.index,
                 "loss before": before.loss}, fixes, source=opt.source or before.source))
            break
    for scaler in scalers:
        if scaler.every_step_skipped and scaler.updates >= 2 and \
                scaler.scale < STALLED_SCALE:
            fixes = (edits.autocast("bfloat16", names),) if compute_dtype == "float16" else ()
            out.append(Finding(
                "training-stalled", "error", "GradScaler",
                f"The GradScaler skipped every one of the {scaler.updates} steps of the "
                f"script: their gradients held inf/NaN each time, and its scale fell to "
                f"{scaler.scale:g}. The weights never changed. Gradients that stay inf/NaN "
                "even scaled down come from the forward pass, not from float16's range.",
                {"kind": "every-step-skipped", "step": scaler.updates - 1,
                 "steps": scaler.updates, "scale": scaler.scale}, fixes,
                source=scaler.source))
    return out
