"""The distributed engines' precision settings, and ranks that disagree (trace --launch):
half-reduction, distributed-precision, rank-mismatch.

The settings are watched where the script makes them (core/script/distributed.py: DDP's
communication hooks, FSDP2's MixedPrecisionPolicy, FSDP1's MixedPrecision, Accelerator against
accelerate's launch configuration, a DeepSpeed config file); ranks are compared once every
rank has reported (core/script/rank_merge.py). Each fix rewrites the user's line that made the
setting (the finding's `source`).
"""

from __future__ import annotations

import re

from ...common import dtypes
from ..findings import CodeEdit, Finding, Fix
from .edits import replaced, source_line, with_argument
from .words import at_line

OWNS = ("half-reduction", "distributed-precision", "rank-mismatch")

# What rounding to each half dtype does to one value, in words.
_LOSES = {"float16": "values under 6.0e-08 flush to zero and sums past 65504 overflow, "
                     "with 3 decimal digits kept",
          "bfloat16": "8 bits of mantissa are kept (about 2 decimal digits): small gradients "
                      "added to large ones vanish, and each rank's rounding adds up in the sum"}


def _fix(fix_id: str, title: str, code: str, source) -> Fix:
    kind = "replace" if source else "add"
    return Fix(fix_id, title, {}, title, CodeEdit(code, kind=kind, source=source))


def _measured(loss: dict | None, dtype: str) -> str:
    """What rounding this run's own gradients to `dtype` lost, measured before the reduction."""
    if not loss or not loss.get("values"):
        return ""
    parts = [f"{loss['underflow']} of {loss['values']} gradient values became 0"]
    if loss.get("overflow"):
        parts.append(f"{loss['overflow']} overflowed to inf")
    if loss.get("sum_overflow"):
        parts.append(f"the sum across {loss['world_size']} ranks can reach "
                     f"{loss['sum_absmax']:.3g}, past float16's 65504")
    parts.append(f"the largest relative error is {loss['relative_error']:.2g}")
    return f" Measured on this run's gradients, rounding them to {dtype}: " + \
        "; ".join(parts) + "."


def ddp_half_hook(hook: str, dtype: str, source: dict | None, loss: dict | None) -> Finding:
    """A DDP communication hook that casts each gradient bucket to a half dtype before the
    all-reduce (fp16_compress_hook, bf16_compress_hook, their wrappers, the builtin one)."""
    line = source_line(source)
    code = (replaced(line, rf"\b(default_hooks\.|default\.)?{re.escape(hook)}\b",
                     "default_hooks.allreduce_hook")
            or "model.register_comm_hook(None, default_hooks.allreduce_hook)")
    if "default_hooks." not in (line or ""):   # the script has not imported them
        code = "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n" + code
    return Finding(
        "half-reduction", "warning", "DistributedDataParallel.comm_hook",
        f"DDP's gradients are all-reduced in {dtype}: {hook}{at_line(source)} rounds each "
        f"rank's gradient bucket to {dtype} before the sum ({_LOSES[dtype]}). The weights are "
        f"float32, but what the optimizer gets is {dtype}-rounded." + _measured(loss, dtype)
        + " All-reduce in float32 (DDP's default hook), or compress only once the loss curve "
        "matches the float32 run's.",
        {"engine": "DDP", "setting": hook, "dtype": dtype, "loss": loss},
        (_fix("ddp-allreduce-float32", "All-reduce the gradients in float32", code, source),),
        source=source)


def policy_half_reduction(engine: str, cls: str, policy: dict, source: dict | None
                          ) -> Finding | None:
    """An FSDP policy (FSDP2 MixedPrecisionPolicy, FSDP1 MixedPrecision) that reduce-scatters
    gradients in a half dtype: reduce_dtype half, or unset with param_dtype half (the gradient
    is then reduced in param_dtype)."""
    reduce = policy.get("reduce_dtype") or policy.get("param_dtype")
    if reduce not in dtypes.HALF_NAMES:
        return None
    said = (f"reduce_dtype={_torch(reduce)}" if policy.get("reduce_dtype")
            else f"param_dtype={_torch(reduce)} with no reduce_dtype (the gradients are then "
                 f"reduced in param_dtype)")
    line = source_line(source)
    code = with_argument(line, cls, "reduce_dtype=torch.float32") or (
        f"{cls}(param_dtype={_torch(policy.get('param_dtype') or reduce)}, "
        "reduce_dtype=torch.float32)")
    return Finding(
        "half-reduction", "warning", f"{engine}.{cls}.reduce_dtype",
        f"{engine} reduce-scatters the gradients across ranks in {reduce}: {cls}({said})"
        f"{at_line(source)} ({_LOSES[reduce]}). Compute in {reduce} and reduce in float32: "
        "the reduction is a small share of a step's time, and its rounding errors add up over "
        "ranks and steps.",
        {"engine": engine, "setting": said, "dtype": reduce, "policy": policy},
        (_fix("fsdp-reduce-float32", "Reduce the gradients in float32", code, source),),
        source=source)


def half_params_without_scaler(engine: str, cls: str, policy: dict, source: dict | None
                               ) -> Finding:
    """float16 compute parameters under FSDP, and no (sharded) gradient scaler in the script."""
    line = source_line(source)
    return Finding(
        "distributed-precision", "warning", f"{engine}.{cls}.param_dtype",
        f"{engine} computes in float16 ({cls}(param_dtype=torch.float16){at_line(source)}) and "
        "the script makes no gradient scaler: gradients under 6.0e-08 flush to zero in the "
        "backward pass and large ones overflow, and no step is skipped when they do. Scale the "
        "loss with a ShardedGradScaler (scaler.scale(loss).backward(); scaler.step(optimizer); "
        "scaler.update()), or compute in bfloat16.",
        {"engine": engine, "setting": "param_dtype=torch.float16", "scaler": None,
         "policy": policy},
        (_fix("fsdp-sharded-scaler", "Scale the loss with a ShardedGradScaler",
              "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
              "scaler = ShardedGradScaler()", None),
         _fix("fsdp-param-bfloat16", "Compute in bfloat16",
              replaced(line, r"torch\.float16|torch\.half", "torch.bfloat16")
              or f"{cls}(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)", source)),
        source=source)


def accelerator_against_launch(asked: str, launched: str, source: dict | None) -> Finding:
    """Accelerator(mixed_precision=...) in the script, and another mixed precision in
    accelerate's launch configuration (`accelerate launch --mixed_precision`, its config file):
    the script's argument wins, silently."""
    line = source_line(source)
    code = replaced(line, r"""\s*,?\s*mixed_precision\s*=\s*(["'])[^"']*\1\s*,?""", "") \
        or "accelerator = Accelerator()"
    code = code.replace("(,", "(").replace(", )", ")")
    return Finding(
        "distributed-precision", "warning", "Accelerator.mixed_precision",
        f"The script asks Accelerator(mixed_precision={asked!r}){at_line(source)}, and the "
        f"launch configuration says {launched!r}: the script's argument wins without a word, so "
        f"this run is {asked!r}, not the {launched!r} the launch command shows. Leave the "
        "choice to the launch configuration.",
        {"engine": "accelerate", "setting": f"mixed_precision={asked!r}", "launch": launched},
        (_fix("accelerator-from-launch", "Take the mixed precision from the launch "
              "configuration", code, source),),
        source=source)


def deepspeed_config(config: dict, path: str, autocast: str | None) -> list[Finding]:
    """A DeepSpeed config's precision: fp16 and bf16 both on, a half communication dtype, a
    static loss scale, torch_autocast beside fp16/bf16, and the script's own autocast in
    another dtype than the engine's."""
    out = []
    on = [name for name in ("fp16", "bf16") if _enabled(config.get(name))]
    name = path.rsplit("/", 1)[-1]
    where = {"file": path, "line": None}
    if len(on) == 2:
        out.append(Finding(
            "distributed-precision", "error", "deepspeed.fp16",
            f"{name} enables both fp16 and bf16: DeepSpeed refuses the config. Keep one: "
            "bf16 where the GPU has it (no loss scaling needed), else fp16.",
            {"engine": "DeepSpeed", "config": path, "enabled": on},
            (_fix("deepspeed-one-half", "Enable bf16 only",
                  '{"bf16": {"enabled": True}, "fp16": {"enabled": False}}', None),),
            source=where))
    comm = config.get("communication_data_type")
    comm = {"fp16": "float16", "bf16": "bfloat16", "bfp16": "bfloat16"}.get(comm, comm)
    if comm in dtypes.HALF_NAMES:
        out.append(Finding(
            "half-reduction", "warning", "deepspeed.communication_data_type",
            f"{name} sets communication_data_type {config['communication_data_type']!r}: "
            f"DeepSpeed all-reduces the gradients in {comm} ({_LOSES[comm]}). Reduce in float32.",
            {"engine": "DeepSpeed", "setting": "communication_data_type", "dtype": comm,
             "config": path},
            (_fix("deepspeed-communicate-float32", "Communicate in float32",
                  '{"communication_data_type": "fp32"}', None),),
            source=where))
    fp16 = config.get("fp16") or {}
    if _enabled(fp16) and fp16.get("loss_scale") not in (None, 0, "auto"):
        out.append(Finding(
            "distributed-precision", "warning", "deepspeed.fp16.loss_scale",
            f"{name} gives fp16 a static loss scale ({fp16['loss_scale']}): DeepSpeed then "
            "never lowers it when gradients overflow, nor raises it when they underflow. "
            "Set loss_scale 0 (dynamic).",
            {"engine": "DeepSpeed", "setting": "fp16.loss_scale", "config": path},
            (_fix("deepspeed-dynamic-scale", "Scale the loss dynamically",
                  '{"fp16": {"enabled": True, "loss_scale": 0}}', None),),
            source=where))
    engine = {"fp16": "float16", "bf16": "bfloat16"}.get(on[0]) if len(on) == 1 else None
    if _enabled(config.get("torch_autocast")) and on:
        out.append(Finding(
            "distributed-precision", "warning", "deepspeed.torch_autocast",
            f"{name} enables torch_autocast and {on[0]} together: DeepSpeed casts the whole "
            f"model to {engine or on[0]} and autocasts on top. torch_autocast is meant with "
            "fp16/bf16 off (float32 weights, autocast compute).",
            {"engine": "DeepSpeed", "setting": "torch_autocast", "config": path},
            (_fix("deepspeed-autocast-alone", "torch_autocast with float32 weights",
                  f'{{"torch_autocast": {{"enabled": True}}, "{on[0]}": {{"enabled": False}}}}',
                  None),),
            source=where))
    if autocast in dtypes.HALF_NAMES and engine is not None and autocast != engine:
        out.append(Finding(
            "distributed-precision", "warning", "deepspeed.autocast",
            f"The script runs its model under its own autocast to {autocast}, inside a DeepSpeed "
            f"engine whose {name} says {on[0]} ({engine}): the engine's weights are {engine}, "
            f"the compute {autocast}. Let the config decide: drop the script's autocast, or set "
            f"the config to the dtype it asks for.",
            {"engine": "DeepSpeed", "setting": on[0], "autocast": autocast, "config": path},
            (_fix("deepspeed-config-dtype", f"{on[0]} in the config, no autocast of the script's",
                  f'{{"{on[0]}": {{"enabled": True}}}}', None),),
            source=where))
    return out


def rank_mismatch(what: str, values: dict, sources: dict, argument: tuple | None = None
                  ) -> Finding:
    """Ranks of one run that disagree on a dtype, a device type or a precision setting.
    `values`: rank -> value; `sources`: rank -> {"file", "line"} or None; `argument`: (call,
    keyword) that made the setting at those lines, for the fix: the lowest rank's value there."""
    groups: dict = {}
    for rank, value in sorted(values.items()):
        groups.setdefault(value, []).append(rank)
    said = "; ".join(f"{_ranks(ranks)}: {value}" for value, ranks in groups.items())
    source = next((sources[r] for r in sorted(sources) if sources[r]), None)
    lines = sorted({s["line"] for s in sources.values() if s and s.get("line")})
    where = f" (set at line {', '.join(map(str, lines))})" if lines else ""
    first = values[min(values)]
    fixes = ()
    if argument is not None and source is not None:
        value = _torch(first) if isinstance(first, str) and dtypes.is_floating_name(first) \
            else repr(first)
        code = with_argument(source_line(source), argument[0], f"{argument[1]}={value}")
        if code:
            fixes = (_fix("ranks-same-setting", f"{argument[1]}={value} on every rank", code,
                          source),)
    return Finding(
        "rank-mismatch", "warning", what,
        f"The ranks disagree on the {what}{where}: {said}. Every rank runs the same step on "
        "its share of the data, so the gradients they sum come from different computations; "
        "a setting made from the rank (RANK, LOCAL_RANK, the device) is the usual cause. Set "
        "it the same on every rank.",
        {"what": what, "values": {str(k): v for k, v in values.items()}}, fixes, source=source)


def _ranks(ranks: list) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _torch(dtype: str | None) -> str:
    return f"torch.{dtype}" if dtype else "None"


def _enabled(section) -> bool:
    return isinstance(section, dict) and section.get("enabled") in (True, "true", "auto")
