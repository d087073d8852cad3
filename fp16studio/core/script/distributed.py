"""The distributed engines' precision settings, watched where the script makes them
(half-reduction, distributed-precision: core/diagnostics/rules/distributed.py).

A watcher of the ScriptWatch (core/script/evidence.py): `install()`, `uninstall()`,
`findings()`, and `facts()` (what every rank must agree on, compared across ranks by
core/script/rank_merge.py). It wraps
- `DistributedDataParallel.register_comm_hook` and `_register_builtin_comm_hook`: a hook that
  casts each gradient bucket to float16/bfloat16 before the all-reduce (default_hooks'
  fp16/bf16_compress_hook and _wrapper, the builtin FP16_COMPRESS). The half hook itself is
  wrapped so that its first buckets are measured: what rounding them to the half dtype loses
  against float32 on this rank's own gradients (no collective of ours: local arithmetic);
- FSDP2's `fully_shard(mp_policy=MixedPrecisionPolicy(...))` (the policy's own line, where it
  was made) and FSDP1's `FullyShardedDataParallel(mixed_precision=MixedPrecision(...))`, when
  the script imports torch.distributed.fsdp; whether the script makes a GradScaler (a
  ShardedGradScaler is one) for float16 parameters;
- a DeepSpeed config: a JSON file named in the script's arguments or in accelerate's launch
  environment, read as data (DeepSpeed itself is not needed).
Accelerator(mixed_precision=...) is FlagWatch's (core/script/flags.py); here it is compared
with accelerate's launch configuration (ACCELERATE_MIXED_PRECISION).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..diagnostics.report import RunError
from ..common import dtypes
from ..diagnostics.findings import Finding
from ..diagnostics.rules.distributed import (
    accelerator_against_launch,
    ddp_half_hook,
    deepspeed_config,
    half_params_without_scaler,
    policy_half_reduction,
)
from .library_calls import after_import, unwatch
from .tracer import Patches

MEASURED_BUCKETS = 4     # a half hook's first buckets measured; then it only passes them on
_HALF_HOOKS = {"fp16_compress": "float16", "bf16_compress": "bfloat16"}
_DEEPSPEED_KEYS = ("fp16", "bf16", "zero_optimization", "train_micro_batch_size_per_gpu",
                   "train_batch_size", "torch_autocast", "communication_data_type")


class DistributedWatch:
    def __init__(self, user, watch=None):
        self.user = user
        self.watch = watch               # the ScriptWatch: its FlagWatch, its traces
        self.hooks: list[dict] = []      # {"hook", "dtype", "source", "loss"}
        self.policies: list[dict] = []   # {"engine", "cls", "policy", "source"}
        self.scalers = 0
        self.errors: list[str] = []
        self._made: dict = {}            # id(policy object) -> the line that made it
        self._patches = Patches()
        self._finders: list = []

    # -- installing ---------------------------------------------------------------------------
    def install(self):
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        self._patches.set(DDP, "register_comm_hook", self._comm_hook(DDP.register_comm_hook))
        self._patches.set(DDP, "_register_builtin_comm_hook",
                          self._builtin_hook(DDP._register_builtin_comm_hook))
        scaler = torch.amp.GradScaler
        self._patches.set(scaler, "__init__", self._scaler_init(scaler.__init__))
        self._finders = [after_import("torch.distributed.fsdp", self._wrap_fsdp, self.errors)]

    def uninstall(self):
        for finder in self._finders:
            unwatch(finder)
        self._patches.undo()

    def _here(self) -> dict | None:
        return self.user.frame_source(sys._getframe(2))

    # -- DDP ------------------------------------------------------------------------------------
    def _comm_hook(self, original):
        watch = self

        def register_comm_hook(ddp, state, hook):
            name = getattr(hook, "__name__", type(hook).__name__)
            dtype = next((d for key, d in _HALF_HOOKS.items() if key in name), None)
            if dtype is not None:
                record = {"hook": name, "dtype": dtype, "source": watch._here(), "loss": None}
                watch.hooks.append(record)
                hook = _measuring(hook, dtype, record, watch.errors)
            return original(ddp, state, hook)

        register_comm_hook.__wrapped__ = original
        return register_comm_hook

    def _builtin_hook(self, original):
        watch = self

        def _register_builtin_comm_hook(ddp, comm_hook_type):
            if "FP16" in str(comm_hook_type):
                watch.hooks.append({"hook": "FP16_COMPRESS", "dtype": "float16",
                                    "source": watch._here(), "loss": None})
            return original(ddp, comm_hook_type)

        _register_builtin_comm_hook.__wrapped__ = original
        return _register_builtin_comm_hook

    # -- FSDP ------------------------------------------------------------------------------------
    def _wrap_fsdp(self, fsdp):
        self._patches.set(fsdp, "fully_shard", self._fully_shard(fsdp.fully_shard))
        for cls in (fsdp.MixedPrecisionPolicy, fsdp.MixedPrecision):
            self._patches.set(cls, "__init__", self._policy_init(cls.__init__))
        owner = fsdp.FullyShardedDataParallel
        self._patches.set(owner, "__init__", self._fsdp1_init(owner.__init__))

    def _policy_init(self, original):
        watch = self

        def __init__(policy, *args, **kwargs):
            original(policy, *args, **kwargs)
            watch._made[id(policy)] = watch._here()

        __init__.__wrapped__ = original
        return __init__

    def _fully_shard(self, original):
        watch = self

        def fully_shard(module, *args, **kwargs):
            watch._policy("FSDP2", kwargs.get("mp_policy"), watch._here())
            return original(module, *args, **kwargs)

        fully_shard.__wrapped__ = original
        return fully_shard

    def _fsdp1_init(self, original):
        watch = self

        def __init__(fsdp, module, *args, **kwargs):
            watch._policy("FSDP", kwargs.get("mixed_precision"), watch._here())
            original(fsdp, module, *args, **kwargs)

        __init__.__wrapped__ = original
        return __init__

    def _policy(self, engine: str, policy, called: dict | None):
        if policy is None or any(p["object"] is policy for p in self.policies):
            return   # fully_shard on each block, then the root, with the one policy
        fields = {name: getattr(policy, name, None) for name in
                  ("param_dtype", "reduce_dtype", "output_dtype", "buffer_dtype",
                   "cast_forward_inputs")}
        said = {k: dtypes.name_of(v) if v is not None and k.endswith("dtype") else v
                for k, v in fields.items() if v is not None}
        self.policies.append({"engine": engine, "cls": type(policy).__name__, "policy": said,
                              "source": self._made.get(id(policy)) or called, "object": policy})

    def _scaler_init(self, original):
        watch = self

        def __init__(scaler, *args, **kwargs):
            original(scaler, *args, **kwargs)
            watch.scalers += 1

        __init__.__wrapped__ = original
        return __init__

    # -- reading -------------------------------------------------------------------------------
    def findings(self, error: RunError | None = None) -> list[Finding]:
        out = [ddp_half_hook(h["hook"], h["dtype"], h["source"], h["loss"]) for h in self.hooks]
        for p in self.policies:
            reduced = policy_half_reduction(p["engine"], p["cls"], p["policy"], p["source"])
            if reduced is not None:
                out.append(reduced)
            if p["policy"].get("param_dtype") == "float16" and not self.scalers:
                out.append(half_params_without_scaler(p["engine"], p["cls"], p["policy"],
                                                      p["source"]))
        launched = os.environ.get("ACCELERATE_MIXED_PRECISION")
        for setting in self._accelerators():
            asked = setting.flags.get("mixed_precision")
            if launched and asked and asked != launched:
                out.append(accelerator_against_launch(asked, launched, setting.source))
        for path, config in _deepspeed_configs(sys.argv[1:]):
            out.extend(deepspeed_config(config, path, self._autocast_dtype()))
        return out

    def facts(self) -> dict:
        """The precision settings of this rank, by name: {"value", "source", "argument"}."""
        out = {}
        autocast = self._autocast()
        if autocast is not None:
            out["autocast dtype"] = {"value": autocast.dtype or "off", "source": autocast.source,
                                     "argument": ["autocast", "dtype"]}
        for h in self.hooks:
            out["DDP communication hook"] = {"value": h["hook"], "source": h["source"]}
        for p in self.policies:
            for name, value in p["policy"].items():
                out[f"{p['engine']} {name}"] = {"value": value, "source": p["source"],
                                                "argument": [p["cls"], name]}
        return out

    def _autocast(self):
        traces = getattr(getattr(self.watch, "tracer", None), "traces", None) or ()
        return next((t.autocast for t in traces if t.autocast is not None), None)

    def _autocast_dtype(self) -> str | None:
        autocast = self._autocast()
        return autocast.dtype if autocast is not None else None

    def _accelerators(self) -> list:
        return [s for w in getattr(self.watch, "watchers", ()) for s in getattr(w, "settings", ())
                if getattr(s, "kind", None) == "Accelerator"]


def _measuring(hook, dtype: str, record: dict, errors: list):
    """`hook`, measuring its first buckets: this rank's float32 gradients against the same
    rounded to `dtype` (what the all-reduce then sums), before the hook casts them."""
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    half = dtypes.to_torch(dtype)
    seen = [0]

    def measured_hook(state, bucket):
        if seen[0] < MEASURED_BUCKETS:
            seen[0] += 1
            try:
                _add_loss(record, bucket.buffer().detach(), half, world, torch)
            except Exception as bug:  # noqa: BLE001 - ours must not change the script
                errors.append(f"measuring {record['hook']}: {type(bug).__name__}: {bug}")
        return hook(state, bucket)

    measured_hook.__name__ = getattr(hook, "__name__", "hook")
    return measured_hook


def _add_loss(record: dict, grads, half, world: int, torch):
    g = grads.float()
    h = g.to(half).float()
    finite = torch.isfinite(g)
    nonzero = (g != 0) & finite
    size = g.abs().masked_fill(~finite, 0)
    rel = ((h - g).abs() / size.clamp_min(torch.finfo(torch.float32).tiny)).masked_fill(
        ~nonzero | ~torch.isfinite(h), 0)
    underflow, overflow, rel_max, absmax = torch.stack([
        (nonzero & (h == 0)).sum().double(), (finite & ~torch.isfinite(h)).sum().double(),
        rel.max().double(), size.max().double()]).tolist()
    loss = record["loss"] or {"values": 0, "underflow": 0, "overflow": 0, "relative_error": 0.0,
                              "world_size": world, "sum_absmax": 0.0, "sum_overflow": False}
    loss["values"] += g.numel()
    loss["underflow"] += int(underflow)
    loss["overflow"] += int(overflow)
    loss["relative_error"] = max(loss["relative_error"], rel_max)
    loss["sum_absmax"] = max(loss["sum_absmax"], absmax * world)
    loss["sum_overflow"] = half == torch.float16 and loss["sum_absmax"] > 65504
    record["loss"] = loss


def _deepspeed_configs(args) -> list[tuple[str, dict]]:
    """DeepSpeed configs the run names: JSON files among the script's arguments (--deepspeed
    ds.json, --deepspeed_config=ds.json) and accelerate's launch environment."""
    names = [a.split("=", 1)[-1] for a in args if a.endswith(".json")]
    names += [os.environ[key] for key in ("ACCELERATE_DEEPSPEED_CONFIG_FILE",)
              if os.environ.get(key)]
    out = []
    for name in dict.fromkeys(names):
        try:
            config = json.loads(Path(name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and any(key in config for key in _DEEPSPEED_KEYS):
            out.append((str(Path(name).resolve()), config))
    return out
