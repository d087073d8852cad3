"""The FP8 plan of a pipeline (`fp16studio fp8`): its model in bfloat16, one forward pass on the
user's batch, and for each nn.Linear what FP8 would do to it.

Each Linear is watched by a forward hook that takes what only the call holds: its GEMM FLOPs,
the abs-max of its weight and input, and a stratified sample of the output's rows and features
(`sample_rows`) with the input's rows behind them. After the pass the samples of all layers are
measured together (`probed_layers`): the scale the recipe picks (of the whole tensors, against
e4m3's 448), the share of non-zero values that fall under e4m3's smallest step once scaled and,
with torchao installed, the SQNR of the output Float8Linear would give there (torchao's cast, its
emulated matmul) against the bfloat16 output. Casting every value would cost a CPU ten times the
forward pass, and measuring each layer in its own hook, small operation by small operation,
four times (docs/benchmarks.md). The rules (eligibility, which layers stay bfloat16, the document) are
fp8_plan's; without torchao they still give eligibility, FLOPs and ranges, and the preflight
says what is missing.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

from ..common.errors import InputError, check_cancel, first_line, raise_if_disk_full, report_progress
from ..common.float8 import parse_recipe
from ..common.precision import float8_scale
from ..common.library_logs import library_logs_quieted
from ..diagnostics.rules import fp8 as fp8_rules
from ..run.distance import distances
from ..run.float8 import INSTALL_HINT, float8_config, fp8_support, torchao_float8
from ..spec.value import PipelineSpec
from .fp8_plan import (E4M3_MAX, E4M3_SMALLEST, SAMPLE_FEATURES, SAMPLE_ROWS,
                       SENSITIVE_SQNR_DB, SPEED_GEMM, Fp8Plan, LayerPlan, decide,
                       is_fp8_checkpoint)


def sample_rows(largest, bound: int):
    """At most `bound` rows of a tensor whose rows' largest magnitudes are `largest`, and the
    weight of each: a stratified sample whose weighted sums estimate the whole tensor's. The
    bound // 4 largest rows stand for themselves (an SQNR is decided by its outliers: a
    transformer's few massive tokens and channels); the others, in order of size, are taken
    every k-th, each standing for k. Deterministic, and no read-back from the device."""
    import torch

    positions, weights = _strata(largest.numel(), bound, largest.device)
    if positions is None:
        return torch.arange(largest.numel(), device=largest.device), weights
    return torch.argsort(largest, descending=True, stable=True).index_select(0, positions), weights


@functools.lru_cache(maxsize=64)
def _strata(count: int, bound: int, device):
    """sample_rows's picks as positions in the order of size (None: every row), and weights."""
    import torch

    if count <= bound:
        return None, torch.ones(count, device=device)
    top = bound // 4
    rest = range(top, count, -(-(count - top) // (bound - top)))
    weights = [1.0] * top + [(count - top) / len(rest)] * len(rest)
    return (torch.tensor([*range(top), *rest], device=device),
            torch.tensor(weights, device=device))


class Float8Cast:
    """Float8Linear's cast of a scaled operand, and back: torchao's `to_fp8_saturated` into the
    dtype its config names (e4m3 for both operands in both recipes), then float32."""

    def __init__(self, float8, config):
        import torch

        self.saturated = float8.to_fp8_saturated
        self.dtype = config.cast_config_input.target_dtype
        # torch's own conversion of each of the 256 codes: read back by table they are the same
        # values as the conversion torchao's emulated matmul calls, five times faster on a CPU.
        self.table = torch.arange(256, dtype=torch.uint8).view(self.dtype).float()

    def __call__(self, scaled):
        import torch

        codes = self.saturated(scaled, self.dtype).view(torch.uint8)
        if self.table.device != codes.device:
            self.table = self.table.to(codes.device)
        return self.table.index_select(0, codes.reshape(-1).int()).view(codes.shape)


class SampledCall(NamedTuple):
    """What one call of a Linear leaves for the measurement after the pass: its input's range
    (aminmax: 0-d tensors), the sampled rows of its input, the weight's rows and the bias at the
    sampled features, the bfloat16 output at the sampled rows and features, and each sampled
    row's and feature's weight (`sample_rows`)."""
    input_range: tuple
    inputs: object
    weight_rows: object
    bias: object                     # None where the layer has none
    reference: object
    row_weights: object
    feature_weights: object


class LinearProbe:
    """What FP8 does to one nn.Linear, measured in its forward hook on every call.

    The FLOPs, abs-max and scales are of the whole operands. The underflow shares and the SQNR
    are estimated on a sample (`sample_rows`): at most `sample[0]` rows of the input (tokens)
    and `sample[1]` of the weight (output features), cast with the whole tensors' scales, so
    each sampled output value is the one Float8Linear gives at its place. The hook takes only
    what the call alone holds (the input's range, the sampled rows); `probed_layers` measures
    the samples of all the probes together after the pass and reads the figures back once.
    """

    def __init__(self, name: str, module, recipe: str, cast: Float8Cast | None,
                 sample: tuple[int, int] = (SAMPLE_ROWS, SAMPLE_FEATURES)):
        self.module = module
        self.rowwise = recipe == "rowwise"
        self.sample = sample
        self.layer = LayerPlan(name=name, in_features=module.in_features,
                               out_features=module.out_features)
        self.cast = cast                     # Float8Cast, or None (no torchao: no SQNR)
        self.calls: list[SampledCall] = []
        self.weight_range = None             # aminmax of the whole weight, at its first call
        self.values = [0, 0]                 # [output values sampled, output values]
        # With the call's keywords: a layer called as `self.a(input=h)` is measured too.
        self.handle = module.register_forward_hook(self.measure, with_kwargs=True)

    def measure(self, module, args, kwargs, output):
        import torch

        x = args[0] if args else kwargs.get("input")
        if not torch.is_tensor(x) or not torch.is_tensor(output) or not x.numel() \
                or not output.numel():   # a zero-width layer: nothing to measure or convert
            return
        x = x.detach().reshape(-1, self.layer.in_features)
        out = output.detach().reshape(-1, self.layer.out_features)
        self.layer.flops += 2 * x.shape[0] * self.layer.in_features * self.layer.out_features
        self.layer.rows = max(self.layer.rows, x.shape[0])
        if self.weight_range is None:   # read while the call's GEMM left it in the cache
            self.weight_range = torch.aminmax(module.weight.detach())
        # The sample: rows by their output's largest value, then features by theirs in them.
        rows, row_weights = sample_rows(out.abs().amax(dim=1), self.sample[0])
        reference = out.index_select(0, rows)
        features, feature_weights = sample_rows(reference.abs().amax(dim=0), self.sample[1])
        bias = None if module.bias is None else module.bias.detach().index_select(0, features)
        self.calls.append(SampledCall(
            torch.aminmax(x), x.index_select(0, rows),
            module.weight.detach().index_select(0, features), bias,
            reference.index_select(1, features), row_weights, feature_weights))
        self.values[0] += rows.numel() * features.numel()
        self.values[1] += out.numel()

    def result(self) -> LayerPlan:
        return probed_layers([self])[0]


# The figures of one call, read back in one row: the abs-max and the recipe's scale of the whole
# weight and input (rowwise: the largest row's, the smallest scale), then per operand (input,
# weight) the weighted count of the sampled values under e4m3's smallest step once scaled (zeros
# included), of the zeros, and of the sampled rows; then the weighted |bf16|^2, |fp8|^2 and
# |fp8 - bf16|^2 of the sampled output (distances' sums; NaN without torchao).
CALL_FIGURES = ("weight_amax", "input_amax", "weight_scale", "input_scale",
                "input_under", "input_zeros", "input_rows",
                "weight_under", "weight_zeros", "weight_rows", "signal", "power", "noise")


# The most sampled operand values measured in one stack: about 1 MB of float32, so that each
# of the measurement's dozen passes over them stays in a CPU core's cache (past it, each pass
# costs two to three times as much a value as the cached one).
STACKED_VALUES = 2 ** 18


class ProbedCall(NamedTuple):
    layer: int                      # the probe's place in probed_layers's list
    probe: LinearProbe
    call: SampledCall


def probed_layers(probes: list[LinearProbe]) -> list[LayerPlan]:
    """The probes' LayerPlan rows (the probes of one pass, one recipe), their hooks removed and
    their calls' samples measured: the calls alike (device, dtypes, shapes, bias) stacked, so
    that each step of the measurement is one operation for all of them rather than one per
    layer, and every figure read back in one transfer per device."""
    import torch

    groups: dict[tuple, list[ProbedCall]] = {}
    for index, probe in enumerate(probes):
        probe.handle.remove()
        weight = probe.module.weight
        for call in probe.calls:
            key = (weight.device, call.inputs.dtype, weight.dtype, tuple(call.inputs.shape),
                   call.weight_rows.shape[0], call.bias is not None)
            groups.setdefault(key, []).append(ProbedCall(index, probe, call))
    stacks: dict[object, list[list[ProbedCall]]] = {}
    for (device, *_), members in groups.items():
        call = members[0].call
        step = max(1, STACKED_VALUES // (call.inputs.shape[0] + call.weight_rows.shape[0])
                   // call.inputs.shape[1])
        stacks.setdefault(device, []).extend(members[start:start + step]
                                             for start in range(0, len(members), step))
    calls = [[] for _ in probes]
    for parts in stacks.values():
        members = [member for part in parts for member in part]
        # The whole operands' abs-max and scales, of all the calls at once.
        ranges = torch.stack([bound for m in members
                              for pair in (m.probe.weight_range, m.call.input_range)
                              for bound in pair]).float().view(-1, 2, 2)
        amax = torch.maximum(ranges[..., 0].abs(), ranges[..., 1])    # [calls, (weight, input)]
        scales = float8_scale(amax, E4M3_MAX, probes[0].rowwise)
        ends = itertools.accumulate(len(part) for part in parts)
        figures = [_measured_calls(part, scales[end - len(part):end])
                   for part, end in zip(parts, ends)]
        values = torch.cat([amax.double(), scales.double(), torch.cat(figures)], 1).tolist()
        for member, row in zip(members, values):   # the one read-back, above
            calls[member.layer].append(dict(zip(CALL_FIGURES, row)))
    return [_layer(probe, figures) for probe, figures in zip(probes, calls)]


def _measured_calls(members: list[ProbedCall], scales):
    """CALL_FIGURES past the scales of calls alike (a stack of `probed_layers`, `scales` their
    whole operands'), as a float64 [calls, figures] tensor on their device."""
    import torch

    rowwise, inputs = members[0].probe.rowwise, members[0].call.inputs.shape[0]
    # The sampled rows of both operands (both in_features long), call by call, as one block:
    # fewer, larger operations. Each row is scaled as torchao scales it, in float32 (its
    # _ToFloat8ConstrFunc; a half block times a float32 column is computed in float32): by
    # the whole tensor's scale, or rowwise by its own.
    block = torch.cat([rows for m in members for rows in (m.call.inputs, m.call.weight_rows)])
    block = block.view(len(members), -1, block.shape[1])
    if rowwise:
        scale = float8_scale(block.abs().amax(dim=2, keepdim=True), E4M3_MAX, True)
    else:
        scale = torch.cat([scales[:, 1:].expand(-1, inputs),
                           scales[:, :1].expand(-1, block.shape[1] - inputs)], 1).unsqueeze(2)
    scaled = block * scale
    # Per row: the values under the step (zeros included), the zeros, and one, each weighted
    # by what the row stands for and added per operand. Compared into float32 ones and zeros:
    # comparisons into bool, and their sums, cost a CPU four times as much.
    magnitude = scaled.abs()
    zeros = torch.eq(magnitude, 0, out=torch.empty_like(magnitude)).sum(2)
    under = magnitude.lt_(E4M3_SMALLEST).sum(2)
    weights = torch.cat([torch.stack([m.call.row_weights for m in members]),
                         torch.stack([m.call.feature_weights for m in members])], 1)
    weighted = torch.stack([under, zeros, torch.ones_like(under)], 2).double() * (
        weights.double().unsqueeze(2))
    return torch.cat([weighted[:, :inputs].sum(1), weighted[:, inputs:].sum(1),
                      _sampled_distance(members, scaled, scale, weights)], 1)


def _sampled_distance(members: list[ProbedCall], scaled, scale, weights):
    """distances' sums (|bf16|^2, |fp8|^2, |fp8 - bf16|^2) of each call's sampled output, each
    value weighted by the values it stands for (the sums estimate the whole output's; max |diff|
    is then not one, and only the SQNR is read), as a float64 [calls, 3] tensor; NaN without
    torchao."""
    import torch

    probe, inputs = members[0].probe, members[0].call.inputs.shape[0]
    if probe.cast is None:
        return scaled.new_full((len(members), 3), math.nan, dtype=torch.float64)
    dtype = members[0].call.inputs.dtype
    dequantised = probe.cast(scaled).div_(scale)
    # torchao's float8_mm with emulate=True: the dequantised operands multiplied in float32,
    # the product in the input's dtype, the bias added in it (Float8Linear).
    fp8 = torch.bmm(dequantised[:, :inputs], dequantised[:, inputs:].transpose(1, 2)).to(dtype)
    if members[0].call.bias is not None:
        fp8 = fp8 + torch.stack([m.call.bias for m in members]).to(dtype).unsqueeze(1)
    root = (weights[:, :inputs, None] * weights[:, None, inputs:]).sqrt()
    reference = torch.stack([m.call.reference for m in members]).float().mul_(root).flatten(1)
    fp8 = fp8.float().mul_(root).flatten(1)
    diff = fp8 - reference
    return torch.stack([torch.linalg.vecdot(v, v) for v in (reference, fp8, diff)], 1).double()


def _layer(probe: LinearProbe, calls: list[dict]) -> LayerPlan:
    """The probe's LayerPlan with its calls' figures: the largest abs-max and smallest scale
    over the calls, the counts and distance sums added."""
    layer = probe.layer
    if not calls:
        return layer
    layer.weight_amax, layer.weight_scale = calls[0]["weight_amax"], calls[0]["weight_scale"]
    # Over the calls; a NaN (a non-finite input) wins, as it does in torch's maximum.
    layer.input_amax = max((call["input_amax"] for call in calls),
                           key=lambda value: (math.isnan(value), value))
    layer.input_scale = min((call["input_scale"] for call in calls),
                            key=lambda value: (not math.isnan(value), value))
    total = {name: sum(call[name] for call in calls) for name in CALL_FIGURES[4:]}
    # The operand that loses more: a weight flushed whole is not diluted by a healthy input.
    shares = [(total[f"{operand}_under"] - zeros) / nonzero for operand in ("input", "weight")
              if (nonzero := total[f"{operand}_rows"] * layer.in_features
                  - (zeros := total[f"{operand}_zeros"]))]
    layer.underflow_share = max(shares, default=None)
    layer.sample_share = probe.values[0] / probe.values[1] if probe.values[1] else None
    if probe.cast is not None:
        layer.sqnr_db = distances([0.0, total["signal"], total["power"],
                                   total["noise"]])["sqnr_db"]
    return layer


def fp8_plan(spec: PipelineSpec, recipe: str = "tensorwise",
             threshold_db: float = SENSITIVE_SQNR_DB, progress=None, cancel=None) -> Fp8Plan:
    """The FP8 plan of the spec's pipeline with `recipe`. Raises InputError for bad input
    (a forward pass that fails in bfloat16 included) and Cancelled."""
    from ..run.pipeline import prepare

    recipe = parse_recipe(recipe)
    float8 = torchao_float8()
    bf16 = plan_spec(spec)
    with library_logs_quieted():
        prepared = prepare(bf16, progress, cancel)
    device, model = prepared.device, prepared.model
    capability, support, supported = fp8_support(recipe, device)
    config = float8_config(float8, recipe, emulate=support[1]) if float8 else None
    check_cancel(cancel)
    report_progress(progress, "forward", "bfloat16 forward pass, its Linear layers measured "
                                         "in FP8")
    try:
        layers = measured_layers(prepared, recipe, float8, config)
    except Exception as exc:  # noqa: BLE001 - the user's pipeline fails in bfloat16: say why
        raise_if_disk_full(exc)
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
                                            supported, spec.train)
    return plan


def plan_spec(spec: PipelineSpec) -> PipelineSpec:
    """The spec as the FP8 plan runs it: in bfloat16 (bench's variant), and where modules kept
    in float32 (`keep_fp32`) meet bfloat16 ones under the spec's autocast, as `diagnose` runs
    them, under bfloat16 autocast (without it their dtypes do not meet)."""
    from .bench import variant_spec

    bf16 = variant_spec(spec, "bfloat16")
    return bf16.replace(autocast="bfloat16") if spec.keep_fp32 and spec.autocast else bf16


def measured_layers(prepared, recipe: str, float8, config,
                    sample: tuple[int, int] = (SAMPLE_ROWS, SAMPLE_FEATURES)) -> list[LayerPlan]:
    """One forward pass of the prepared (bfloat16) pipeline with every nn.Linear measured:
    its LayerPlan rows, in the model's order, before the rules decide on them. `sample`: the
    most rows of each input and weight whose underflow and FP8 output are measured."""
    import torch

    from ..run.pipeline import run_forward

    cast = Float8Cast(float8, config) if float8 else None
    probes = [LinearProbe(name, module, recipe, cast, sample)
              for name, module in prepared.model.named_modules()
              if type(module) is torch.nn.Linear]
    try:
        run_forward(prepared.spec, prepared.model, prepared.batch, prepared.device,
                    inference=False)
    finally:
        for probe in probes:
            probe.handle.remove()
    return probed_layers(probes)


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
        checks.append(gemm_size_check(plan.layers))
    return checks


def gemm_size_check(layers: list[LayerPlan]) -> dict:
    """Whether any eligible layer's GEMM on this batch is large enough for FP8 to train faster
    than bfloat16 (`SPEED_GEMM` in tokens, in_features and out_features)."""
    eligible = [layer for layer in layers if layer.eligible]
    large = [layer for layer in eligible
             if min(layer.rows, layer.in_features, layer.out_features) >= SPEED_GEMM]
    if large:
        return {"check": "layer size", "ok": True, "message":
                f"{len(large)} eligible layer(s) with GEMMs of {SPEED_GEMM} or more in tokens, "
                "in_features and out_features: large enough for FP8 to gain"}
    if not eligible:
        return {"check": "layer size", "ok": False, "message": "no eligible layer to convert"}
    widest = max(eligible, key=lambda layer: min(layer.in_features, layer.out_features))
    hope = (f"a batch of {SPEED_GEMM} tokens a call or more may gain"
            if min(widest.in_features, widest.out_features) >= SPEED_GEMM else
            "these layers are too narrow to gain at any batch size")
    return {"check": "layer size", "ok": False, "message":
            f"no eligible layer's GEMM reaches {SPEED_GEMM} in tokens, in_features and "
            f"out_features (this batch: {max(layer.rows for layer in eligible)} tokens a call; "
            f"the widest layer {widest.in_features}x{widest.out_features}): below that FP8 "
            f"trains slower than bfloat16 on an H100, the casts costing more than the matmul "
            f"saves; {hope}; the numerics below still hold"}
