"""The FP8 plan of a pipeline (`fp16studio fp8`): its model in bfloat16, one forward pass on the
user's batch, and for each nn.Linear what FP8 would do to it.

Each Linear is watched by a forward hook that measures the call on the spot: its GEMM FLOPs, the
abs-max of its weight and input against e4m3's 448 and the scale the recipe picks (of the whole
tensors), and on a stratified sample of the output's rows and features (`sample_rows`) the share
of non-zero values that fall under e4m3's smallest step once scaled and, with torchao installed,
the SQNR of the output Float8Linear would give there (torchao's cast, its emulated matmul)
against the bfloat16 output. Casting every value would cost a CPU ten times the forward pass
(docs/benchmarks.md). The rules (eligibility, which layers stay bfloat16, the document) are
fp8_plan's; without torchao they still give eligibility, FLOPs and ranges, and the preflight
says what is missing.
"""

from __future__ import annotations

import functools

from ..common.errors import InputError, check_cancel, first_line, report_progress
from ..common.float8 import parse_recipe, recipe_support, supported_recipe
from ..common.precision import float8_scale
from ..diagnostics.rules import fp8 as fp8_rules
from ..run.distance import distance_sums, distances
from ..run.float8 import INSTALL_HINT, float8_config, quiet_torchao, torchao_float8
from ..spec.value import PipelineSpec
from .fp8_plan import (E4M3_MAX, E4M3_SMALLEST, SAMPLE_FEATURES, SAMPLE_ROWS,
                       SENSITIVE_SQNR_DB, SPEED_FEATURES, Fp8Plan, LayerPlan, decide,
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


class LinearProbe:
    """What FP8 does to one nn.Linear, measured in its forward hook on every call.

    The FLOPs, abs-max and scales are of the whole operands. The underflow shares and the SQNR
    are estimated on a sample (`sample_rows`): at most `sample[0]` rows of the input (tokens)
    and `sample[1]` of the weight (output features), cast with the whole tensors' scales, so
    each sampled output value is the one Float8Linear gives at its place. Results stay on the
    device until `result` reads them back.
    """

    def __init__(self, name: str, module, recipe: str, cast: Float8Cast | None,
                 sample: tuple[int, int] = (SAMPLE_ROWS, SAMPLE_FEATURES)):
        self.rowwise = recipe == "rowwise"
        self.sample = sample
        self.layer = LayerPlan(name=name, in_features=module.in_features,
                               out_features=module.out_features)
        self.cast = cast                     # Float8Cast, or None (no torchao: no SQNR)
        self.weight = None                   # (abs-max, scale) of the weight, from the first call
        self.input = None                    # (abs-max, smallest scale) over the calls
        # Weighted, per operand (input, weight): [values under e4m3's smallest step once
        # scaled, zeros among them], and the rows counted.
        self.counts = self.counted = 0
        self.sums = None                     # distance_sums, added over the calls
        self.values = [0, 0]                 # [output values sampled, output values]
        self.handle = module.register_forward_hook(self.measure)

    def measure(self, module, args, output):
        import torch

        if not args or not torch.is_tensor(args[0]) or not torch.is_tensor(output):
            return
        x = args[0].detach().reshape(-1, self.layer.in_features)
        out = output.detach().reshape(-1, self.layer.out_features)
        self.layer.flops += 2 * x.shape[0] * self.layer.in_features * self.layer.out_features
        weight = module.weight.detach()
        if self.weight is None:
            self.weight = self._scale(weight)
        x_amax, x_scale = self._scale(x)
        self.input = (x_amax, x_scale.min()) if self.input is None else (
            torch.maximum(self.input[0], x_amax), torch.minimum(self.input[1], x_scale.min()))
        # The sample: rows by their output's largest value, then features by theirs in them.
        rows, row_weights = sample_rows(out.abs().amax(dim=1).float(), self.sample[0])
        reference = out.index_select(0, rows)
        features, feature_weights = sample_rows(reference.abs().amax(dim=0).float(),
                                                self.sample[1])
        reference = reference.index_select(1, features)
        self.values[0] += reference.numel()
        self.values[1] += out.numel()
        # The two operands' sampled rows (both in_features long) scaled, counted and cast at
        # once: fewer, larger operations.
        scale = torch.cat([self._picked(x_scale, rows), self._picked(self.weight[1], features)])
        dequantised = self._cast(
            torch.cat([x.index_select(0, rows), weight.index_select(0, features)]), scale,
            rows.numel(), row_weights, feature_weights)
        if dequantised is None:
            return
        # torchao's float8_mm with emulate=True: the dequantised operands multiplied in
        # float32, the product in the input's dtype, the bias added in it (Float8Linear).
        fp8 = torch.mm(dequantised[:rows.numel()], dequantised[rows.numel():].t()).to(x.dtype)
        if module.bias is not None:
            fp8 = fp8 + module.bias.detach().index_select(0, features).to(x.dtype)
        # Each sampled value weighted by the values it stands for: the sums estimate the whole
        # output's (max |diff| is then not one; only the SQNR is read).
        root = torch.outer(row_weights, feature_weights).sqrt()
        sums = distance_sums(reference.float() * root, fp8.float() * root)
        self.sums = sums if self.sums is None else torch.stack([
            torch.maximum(self.sums[0], sums[0]), *(self.sums[1:] + sums[1:])])

    def _scale(self, tensor):
        """A 2-d operand's abs-max (a 0-d tensor, exact in the operand's own dtype) and the
        recipe's scale (torchao's; rowwise: per row, a column)."""
        import torch

        if self.rowwise:
            amax = tensor.abs().amax(dim=1, keepdim=True)
        else:   # one aminmax, no copy of the tensor
            low, high = torch.aminmax(tensor)
            amax = torch.maximum(low.abs(), high)
        return amax.max(), float8_scale(amax, E4M3_MAX, self.rowwise)

    def _picked(self, scale, picked):
        """The scales of the picked rows, as a column."""
        return scale.index_select(0, picked) if self.rowwise else scale.expand(picked.numel(), 1)

    def _cast(self, rows, scale, inputs: int, input_weights, weight_weights):
        """The sampled rows (the input's `inputs` first, then the weight's) scaled as torchao
        scales them (in float32: its _ToFloat8ConstrFunc) and counted, weighted: the non-zero
        values under e4m3's smallest step. Returns them cast to float8 by torchao and
        dequantised to float32 (None without torchao)."""
        import torch

        scaled = rows.float() * scale
        magnitude = scaled.abs()
        # Per row: values under the step (zeros included), zeros; weighted per operand.
        per_row = torch.stack([(magnitude < E4M3_SMALLEST).sum(1),
                               (magnitude == 0).sum(1)]).to(input_weights.dtype)
        self.counts = self.counts + torch.stack([per_row[:, :inputs] @ input_weights,
                                                 per_row[:, inputs:] @ weight_weights])
        self.counted = self.counted + torch.stack([input_weights.sum(), weight_weights.sum()])
        return None if self.cast is None else self.cast(scaled) / scale

    def result(self) -> LayerPlan:
        import torch

        self.handle.remove()
        layer = self.layer
        if self.weight is not None:
            layer.weight_amax, layer.weight_scale = (float(self.weight[0]),
                                                     float(self.weight[1].min()))
        if self.input is not None:
            layer.input_amax, layer.input_scale = map(float, self.input)
        # The operand that loses more: a weight flushed whole is not diluted by a healthy input.
        counts = self.counts.tolist() if torch.is_tensor(self.counts) else []
        rows = self.counted.tolist() if counts else []
        shares = [(under - zeros) / nonzero for (under, zeros), counted in zip(counts, rows)
                  if (nonzero := counted * self.layer.in_features - zeros)]
        layer.underflow_share = max(shares, default=None)
        if self.values[1]:
            layer.sample_share = self.values[0] / self.values[1]
        if self.sums is not None:
            layer.sqnr_db = distances(self.sums.tolist())["sqnr_db"]
        return layer


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
                                            supported_recipe(device.type, capability),
                                            spec.train)
    return plan


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
