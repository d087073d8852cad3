"""The FP8 plan of a pipeline (`fp16studio fp8`): its model in bfloat16, one forward pass on the
user's batch, and for each nn.Linear what FP8 would do to it.

Each Linear is watched by a forward hook that measures the call on the spot (nothing is kept
between calls): its GEMM FLOPs, the abs-max of its weight and input against e4m3's 448, the scale
the recipe picks, the share of non-zero values that fall under e4m3's smallest step once scaled,
and, with torchao installed, the SQNR of the same input through torchao's Float8Linear (sharing
the layer's weights; emulated where the device has no FP8) against the bfloat16 output. The
rules (eligibility, which layers stay bfloat16, the document) are fp8_plan's; without torchao
they still give eligibility, FLOPs and ranges, and the preflight says what is missing.
"""

from __future__ import annotations

import contextlib
import logging
import math

from ..common.errors import InputError, check_cancel, first_line, report_progress
from ..diagnostics.rules import fp8 as fp8_rules
from ..run.distance import distance_sums, distances
from ..spec.value import PipelineSpec
from .fp8_plan import (E4M3_MAX, E4M3_SMALLEST, RECIPES, SENSITIVE_SQNR_DB, SPEED_FEATURES,
                       Fp8Plan, LayerPlan, decide, is_fp8_checkpoint, recipe_support,
                       supported_recipe)

INSTALL_HINT = "pip install 'fp16studio[fp8]'"


@contextlib.contextmanager
def quiet_torchao():
    """torchao's import logs the GPU kernels it cannot load on this machine and the enums it
    registers with torch (transformers imports more of it while loading a model): not the
    user's concern, kept below their sight while the plan loads it."""
    quiet = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)


def torchao_float8():
    """torchao's float8 (`Float8Linear`, `Float8LinearConfig`, `version`), or None where torchao
    is not installed."""
    from types import SimpleNamespace

    try:
        with quiet_torchao():
            import torchao
            from torchao.float8 import Float8LinearConfig
            from torchao.float8.float8_linear import Float8Linear
    except ImportError:
        return None
    return SimpleNamespace(Float8Linear=Float8Linear, Float8LinearConfig=Float8LinearConfig,
                           version=torchao.__version__)


def float8_config(float8, recipe: str, emulate: bool):
    """torchao's Float8LinearConfig of the recipe, emulated (no FP8 hardware) or not."""
    import dataclasses

    return dataclasses.replace(float8.Float8LinearConfig.from_recipe_name(recipe),
                               emulate=emulate)


def parse_recipe(name: str) -> str:
    text = str(name).strip().lower()
    if text not in RECIPES:
        raise InputError(f"fp8: unknown recipe {name!r} (use {' or '.join(RECIPES)}; "
                         "MXFP8 and NVFP4 need a Blackwell GPU)")
    return text


class LinearProbe:
    """What FP8 does to one nn.Linear, measured in its forward hook on every call."""

    def __init__(self, name: str, module, recipe: str, float8, config):
        self.module = module
        self.rowwise = recipe == "rowwise"
        self.layer = LayerPlan(name=name, in_features=module.in_features,
                               out_features=module.out_features)
        # Shares the module's weight and bias: no copy.
        self.fp8 = float8.Float8Linear.from_float(module, config=config) if float8 else None
        # Per operand: [values under e4m3's smallest step once scaled, non-zero values].
        self.counts = {"weight": [0, 0], "input": [0, 0]}
        self.sums = None                     # distance_sums, added over the calls
        self.handle = module.register_forward_hook(self.measure)

    def measure(self, module, args, output):
        import torch

        if not args or not torch.is_tensor(args[0]) or not torch.is_tensor(output):
            return
        x = args[0].detach().reshape(-1, self.layer.in_features)
        self.layer.flops += 2 * x.shape[0] * self.layer.in_features * self.layer.out_features
        if self.layer.weight_amax is None:
            self.layer.weight_amax, self.layer.weight_scale = self._range(module.weight.detach(),
                                                                          "weight")
        amax, scale = self._range(x, "input")
        self.layer.input_amax = max(amax, self.layer.input_amax or 0.0)
        self.layer.input_scale = min(scale, self.layer.input_scale or math.inf)
        if self.fp8 is not None:
            sums = distance_sums(output.detach().float(), self.fp8(args[0]).float())
            if sums is not None:
                self.sums = sums if self.sums is None else torch.stack([
                    torch.maximum(self.sums[0], sums[0]), *(self.sums[1:] + sums[1:])])

    def _range(self, tensor, operand: str) -> tuple[float, float]:
        """(abs-max, the recipe's scale) of a 2-d tensor; rowwise: of its largest row. Counts
        the operand's non-zero values that fall under e4m3's smallest step once scaled."""
        import torch

        # In the tensor's own dtype, four passes: its abs-max is exact there, and the threshold
        # (e4m3's smallest step over the scale) is compared in it.
        magnitude = tensor.abs()
        amax = magnitude.amax(dim=1, keepdim=True) if self.rowwise else magnitude.amax()
        # torchao's amax_to_scale: the e4m3 maximum over the clamped abs-max (rowwise: rounded
        # down to a power of 2).
        scale = (E4M3_MAX / amax.double().clamp(min=1e-12)).float()
        if self.rowwise:
            scale = torch.exp2(torch.floor(torch.log2(scale)))
        threshold = (E4M3_SMALLEST / scale).to(tensor.dtype)
        counts = self.counts[operand]
        zeros = tensor.numel() - int(torch.count_nonzero(tensor))
        counts[0] += int(torch.count_nonzero(magnitude < threshold)) - zeros
        counts[1] += tensor.numel() - zeros
        return float(amax.max()), float(scale.min())

    def result(self) -> LayerPlan:
        self.handle.remove()
        # The operand that loses more: a weight flushed whole is not diluted by a healthy input.
        shares = [under / nonzero for under, nonzero in self.counts.values() if nonzero]
        self.layer.underflow_share = max(shares, default=None)
        if self.sums is not None:
            self.layer.sqnr_db = distances(self.sums.tolist())["sqnr_db"]
        return self.layer


def fp8_plan(spec: PipelineSpec, recipe: str = "tensorwise",
             threshold_db: float = SENSITIVE_SQNR_DB, progress=None, cancel=None) -> Fp8Plan:
    """The FP8 plan of the spec's pipeline with `recipe`. Raises InputError for bad input
    (a forward pass that fails in bfloat16 included) and Cancelled."""
    import torch

    from ..run.pipeline import prepare
    from .bench import variant_spec

    recipe = parse_recipe(recipe)
    float8 = torchao_float8()
    bf16 = variant_spec(spec, "bfloat16")
    with quiet_torchao():
        prepared = prepare(bf16, progress, cancel)
    device, model = prepared.device, prepared.model
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    support = recipe_support(recipe, device.type, capability)
    config = float8_config(float8, recipe, emulate=support[1]) if float8 else None
    check_cancel(cancel)
    report_progress(progress, "forward", "bfloat16 forward pass, its Linear layers measured "
                                         "in FP8")
    try:
        layers = measured_layers(prepared, recipe, float8, config)
    except Exception as exc:  # noqa: BLE001 - the user's pipeline fails in bfloat16: say why
        raise InputError(f"fp8: the bfloat16 forward pass failed ({type(exc).__name__}: "
                         f"{first_line(exc, 300)}); diagnose the spec first") from None
    decide(layers, threshold_db)
    plan = Fp8Plan(recipe=recipe, device=str(device),
                   compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
                   emulated=support[1], runs_here=support[0], layers=layers,
                   threshold_db=threshold_db)
    plan.preflight = preflight(plan, support, float8,
                               getattr(model.config, "quantization_config", None))
    plan.findings = fp8_rules.plan_findings(layers, threshold_db, recipe, plan.device, support,
                                            supported_recipe(device.type, capability))
    return plan


def measured_layers(prepared, recipe: str, float8, config) -> list[LayerPlan]:
    """One forward pass of the prepared (bfloat16) pipeline with every nn.Linear measured:
    its LayerPlan rows, in the model's order, before the rules decide on them."""
    import torch

    from ..run.pipeline import run_forward

    probes = [LinearProbe(name, module, recipe, float8, config)
              for name, module in prepared.model.named_modules()
              if type(module) is torch.nn.Linear]
    try:
        run_forward(prepared.spec, prepared.model, prepared.batch, prepared.device,
                    inference=False)
    finally:
        for probe in probes:
            probe.handle.remove()
    return [probe.result() for probe in probes]


def preflight(plan: Fp8Plan, support: tuple, float8, quantization_config) -> list[dict]:
    """The checks before an FP8 run: device and recipe, torchao, torch.compile, an FP8
    checkpoint, and (on a GPU) whether the layers are large enough to gain."""
    gpu = plan.device.startswith("cuda")
    checks = [{"check": "device", "ok": support[0], "message": support[2]}]
    if float8 is None:
        checks.append({"check": "torchao", "ok": False, "message":
                       f"torchao is not installed: eligibility, FLOPs and ranges only, no SQNR "
                       f"measured and no layer kept in bfloat16 for it ({INSTALL_HINT})"})
    else:
        checks.append({"check": "torchao", "ok": True, "message":
                       f"torchao {float8.version}: Float8Linear"
                       + (" emulated" if plan.emulated else "")})
    checks.append({"check": "torch.compile", "ok": not gpu, "message":
                   "FP8 is faster than bfloat16 only under torch.compile (eager Float8Linear is "
                   "slower): the exported script compiles the converted model on a GPU"
                   if gpu else "emulated on this device: no speed to gain, compiled or not"})
    if is_fp8_checkpoint(quantization_config):
        native = gpu and not plan.emulated
        checks.append({"check": "checkpoint", "ok": native, "message":
                       "the checkpoint stores FP8 weights: loaded as FP8" if native else
                       "the checkpoint stores FP8 weights, which transformers dequantises to "
                       "bfloat16 below compute capability 8.9 (twice the memory)"})
    if gpu:
        wide = [layer.name for layer in plan.layers if layer.eligible
                and min(layer.in_features, layer.out_features) >= SPEED_FEATURES]
        checks.append({"check": "layer size", "ok": bool(wide), "message":
                       f"{len(wide)} eligible layer(s) {SPEED_FEATURES} wide or more" if wide else
                       f"no eligible layer is {SPEED_FEATURES} wide: FP8 is slower than bfloat16 "
                       "on GEMMs this small (ao#2262); the numerics below still hold"})
    return checks
