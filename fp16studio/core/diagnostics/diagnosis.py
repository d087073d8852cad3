"""One diagnosis: run the pipeline with the tracer on, then read the evidence with the rules."""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import replace

from ..common import dtypes
from ..common.errors import PipelineFailure, check_cancel, raise_if_disk_full, report_progress
from ..common.gc_pause import gc_paused
from ..hf.loading import is_oom, resolve_device
from ..hf.offload import offloaded_blocks
from ..run.pipeline import (DeviceUnavailable, no_tensor, prepare_batch, prepare_model, primary_output,
                            run_forward)
from ..run.trace import Tracer
from ..run.train_steps import run_train_steps
from ..spec.value import PipelineSpec
from .findings import by_severity
from .inventory import mark, pipeline_tree
from .islands import island_search
from .report import Diagnosis, Environment, ModelOutput, RunError, StepRecord
from .rules import Evidence, run_rules, spec_provenance
from .rules import fp8 as fp8_rules
from .rules.placement import device_unavailable
from .rules.training import training_findings

STAGES = ("model", "dataset", "batch", "forward", "rules")


def diagnose(spec: PipelineSpec, progress=None, cancel=None, warm=None) -> Diagnosis:
    """Load, build the batch, run one traced forward pass, and return findings.

    `warm` (a warm.WarmModel) keeps the loaded model for the next run with the same loading
    keys; without it the model is loaded here and its memory given back before returning.
    Raises InputError for bad input (missing model, dataset, column...) and Cancelled when
    `cancel` is set; a failure of the pipeline itself is part of the result, not an exception.
    """
    timings: dict = {}
    environment = environment_info()
    try:
        with _timed(timings, "model"):
            loaded, processor = (warm.load(spec, progress) if warm is not None
                                 else prepare_model(spec, progress))
    except DeviceUnavailable:
        finding = device_unavailable(spec, environment.devices)
        return Diagnosis(spec=spec, device=spec.device, findings=[finding], timings=timings,
                         environment=environment,
                         error=RunError("DeviceUnavailable", finding.message, "model"))
    except Exception as exc:  # the weights did not fit: a finding, not a crash
        if not is_oom(exc):
            raise
        device = resolve_device(spec)
        error = _failed(exc, "model", None)
        evidence = Evidence(spec=spec, device_type=device.type, param_dtypes={},
                            module_param_dtypes={}, error=error, exception=exc)
        findings = run_rules(evidence)
        del evidence, exc
        _release_memory(device)
        return Diagnosis(spec=spec, device=str(device), findings=findings,
                         error=error, timings=timings, environment=environment)
    device = loaded.device
    # Everything that holds tensors (model, batch, activations, the exception's frames) lives
    # in _run's frame, so it is gone when the memory is released.
    try:
        outcome = _run(spec, loaded, processor, timings, progress, cancel)
    finally:
        del loaded, processor
        _release_memory(device)
    findings, error, output, tree, steps = outcome
    return Diagnosis(spec=spec, device=str(device), findings=findings, error=error,
                     output=output, tree=tree, timings=timings, environment=environment,
                     steps=steps)


def _run(spec, loaded, processor, timings, progress, cancel):
    """(findings, error, output, tree, steps) of one run on a loaded model."""
    check_cancel(cancel)
    model, device = loaded.model, loaded.device
    calls, batch, facts, error, exception, output = [], None, {}, None, None, None
    try:
        with _timed(timings, "batch"):
            build = prepare_batch(spec, loaded, processor, progress, cancel)
        batch, facts = build.batch, build.facts
    except PipelineFailure as failure:  # the user's data steps failed: part of the diagnosis
        exception, facts = failure.exc, failure.facts
        error = _failed(failure.exc, "batch", None)
    if error is None:
        check_cancel(cancel)
        report_progress(progress, "forward", f"forward pass on {device}")
        with _timed(timings, "forward"):
            calls, result, exception, failed_in = _traced_forward(spec, model, batch, device)
        if exception is not None:  # the forward pass failed: that is what we diagnose
            error = _failed(exception, "forward", failed_in)
        else:
            output = describe_output(result)
            if output is None:  # nothing a pipeline could use: a failure, said as such
                error = RunError("NoTensorOutput", no_tensor(result), "forward")
        del result
    # The spec's training steps, after a clean forward pass (a failed or non-finite one is
    # what the findings are about already). Their failure is the run's error, not evidence.
    train_found, steps, train_error = [], [], None
    if spec.train is not None and error is None and output.finite:
        check_cancel(cancel)
        train_found, steps, train_error = _train(spec, model, batch, device, calls, timings,
                                                 progress)
    try:
        check_cancel(cancel)
        report_progress(progress, "rules", "reading the evidence")
        with _timed(timings, "rules"), gc_paused():
            param_dtypes, module_param_dtypes = parameter_dtypes(model)
            provenance, input_provenance = spec_provenance(spec, param_dtypes)
            evidence = Evidence(
                spec=spec, device_type=device.type, param_dtypes=param_dtypes,
                module_param_dtypes=module_param_dtypes,
                keep_in_fp32=tuple(keep_in_fp32_modules(model)),
                adapters=tuple(adapter_modules(model)), facts=facts, calls=calls,
                error=error, exception=exception, provenance=provenance,
                input_provenance=input_provenance, offloaded=offloaded_blocks(model))
            findings = run_rules(evidence)
            search = island_search(findings, spec, model, batch, cancel) \
                if exception is None else None
            if search is not None:   # the rules again, with the islands as evidence
                findings = run_rules(replace(evidence, islands=search))
            findings = by_severity(findings + train_found)
            tree = pipeline_tree(model, batch, calls)
            mark(tree, findings)
    finally:
        if exception is not None:  # its frames hold the model's activations and the batch
            exception.__traceback__ = None
    return findings, error or train_error, output, tree, steps


def _train(spec, model, batch, device, calls, timings, progress):
    """(findings, StepRecords, error) of the spec's training steps after a clean forward."""
    report_progress(progress, "forward", f"{spec.train['steps']} training steps on {device}")
    order: dict = {}
    for call in calls:
        order.setdefault(call.name, call.index)
    with _timed(timings, "train"):
        run = run_train_steps(spec, model, batch, device, order)
    error = None
    if run.exception is not None:
        error = _failed(run.exception, "train", None)
        run.exception.__traceback__ = None  # its frames hold the model's activations
    found = (fp8_rules.training_unsupported(run.fp8_support, spec.train, str(device))
             + training_findings(run.steps, run.compute_dtype, spec.train, error))
    return found, [StepRecord.of(step) for step in run.steps], error


def _traced_forward(spec, model, batch, device):
    """(calls, result, exception, name of the module it hit in) of one traced forward pass.

    The fast pass counts no inf/NaN; when some appeared, the pass runs again counting them,
    so the evidence has exact counts (only failing runs pay for it).
    """
    result = exception = None
    for count in (False, True):
        tracer = Tracer(model, count_nonfinite=count)
        with tracer:
            try:
                result = run_forward(spec, model, batch, device, inference=False)
            except Exception as exc:  # noqa: BLE001 - reported as the diagnosis's error
                exception = exception or exc
                result = None
        if tracer.counted:
            break
    failed_in = tracer.failed_in.name if exception is not None and tracer.failed_in else None
    return tracer.calls, result, exception, failed_in


@contextlib.contextmanager
def _timed(timings: dict, stage: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = round(time.perf_counter() - start, 4)


def _failed(exc: BaseException, stage: str, module: str | None) -> RunError:
    """The pipeline's failure as the diagnosis's error; a full disk is not one (DiskFull)."""
    raise_if_disk_full(exc)
    return RunError.raised(exc, stage, module)


def describe_output(result) -> ModelOutput | None:
    name, tensor = primary_output(result)
    if tensor is None:
        return None
    finite = bool(tensor.isfinite().all()) if tensor.is_floating_point() else True
    return ModelOutput(name=name, dtype=dtypes.name_of(tensor.dtype), shape=list(tensor.shape),
                       finite=finite)


def parameter_dtypes(model) -> tuple[dict, dict]:
    """(floating dtype -> element count, module name -> dtype of its first own floating
    parameter), in one walk over each module's own parameters (a tied one counted once)."""
    counts: dict = {}
    first: dict = {}
    seen: set = set()
    for name, module in model.named_modules():
        for param in module._parameters.values():
            if param is None or not param.is_floating_point():
                continue
            key = dtypes.name_of(param.dtype)
            first.setdefault(name, key)
            if id(param) not in seen:
                seen.add(id(param))
                counts[key] = counts.get(key, 0) + param.numel()
    return counts, first


def keep_in_fp32_modules(model) -> list[str]:
    names = []
    for attr in ("_keep_in_fp32_modules", "_keep_in_fp32_modules_strict"):
        names.extend(getattr(model, attr, None) or ())
    return names


def adapter_modules(model) -> list[str]:
    """The modules a library keeps in float32 on purpose inside a half model: PEFT's adapters
    (on a half base it makes them float32, `autocast_adapter_dtype`, as its docs advise), asked
    of PEFT itself, and only when something imported it."""
    import sys

    if "peft" not in sys.modules:
        return []
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [f"{name}.{attr}" if name else attr for name, module in model.named_modules()
            if isinstance(module, BaseTunerLayer) for attr in module.adapter_layer_names]


def environment_info() -> Environment:
    import datasets
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())] if cuda else ["cpu"]
    # str(): torch's TorchVersion would make whoever unpickles this (the window) import torch.
    gpu = {"cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
           "bf16_supported": torch.cuda.is_bf16_supported(),
           "tf32_matmul": torch.backends.cuda.matmul.allow_tf32} if cuda else {}
    return Environment(torch=str(torch.__version__), transformers=transformers.__version__,
                       datasets=datasets.__version__, devices=devices, **gpu)


def _release_memory(device):
    # Only CUDA needs the memory back at once; on CPU a full collection would cost time for
    # nothing.
    if device.type == "cuda":
        import torch

        gc.collect()
        torch.cuda.empty_cache()


