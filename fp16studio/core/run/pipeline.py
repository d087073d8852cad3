"""The user's pipeline, run as the spec describes it: model, dataset, batch, forward pass.

Steps (in this order): read `samples` rows -> user `preprocess` (Dataset.map) -> processor
(Dataset.map, with `map_dtype` cast inside it) -> labels kept or dropped -> `format` /
`format_dtype` -> DataLoader batch -> `input_dtype` / `input_cast` -> `label_dtype` ->
`input_device` -> model in `model_dtype` on `device`, then `model_cast`, then `keep_fp32` ->
forward under `torch.inference_mode()` and the spec's autocast (on `autocast_device`), both
entered in the calling thread (they are thread-local).
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from dataclasses import dataclass

from ..common import dtypes
from ..common.errors import InputError, check_cancel, report_progress
from ..data.batch import BatchBuild, build_batch
from ..data.sources import load_rows
from ..hf.loading import LoadedModel, load_model, load_processor, quiet_hf, resolve_device
from ..spec.value import PipelineSpec


class DeviceUnavailable(Exception):
    """The spec asks for a device this machine does not have."""


@dataclass
class Prepared:
    spec: PipelineSpec
    loaded: LoadedModel
    processor: object
    build: BatchBuild

    @property
    def model(self):
        return self.loaded.model

    @property
    def batch(self) -> dict:
        return self.build.batch

    @property
    def device(self):
        return self.loaded.device

    @property
    def task(self) -> str:
        return self.loaded.task

    @property
    def main_input(self) -> str:
        return getattr(self.model, "main_input_name", "input_ids")

    @property
    def columns(self) -> dict:
        return self.build.columns


def forward_inputs(model) -> set:
    """Names model.forward accepts; batch columns outside them are dropped."""
    names = set(inspect.signature(model.forward).parameters)
    names.discard("kwargs")
    return names


def prepare_model(spec: PipelineSpec, progress=None):
    """(LoadedModel, processor) for the spec; raises DeviceUnavailable or InputError."""
    device = resolve_device(spec)
    if device is None:
        raise DeviceUnavailable(spec.device)
    report_progress(progress, "model", f"loading {spec.model} in {spec.model_dtype}")
    loaded = load_model(spec, device)
    processor = load_processor(loaded.source, loaded.model, spec)
    return loaded, processor


def prepare_batch(spec: PipelineSpec, loaded: LoadedModel, processor, progress=None,
                  cancel=None) -> BatchBuild:
    report_progress(progress, "dataset", f"reading {spec.samples} rows of {spec.dataset}")
    with quiet_hf():
        rows = load_rows(spec, loaded.model.config, processor)
        check_cancel(cancel)
        report_progress(progress, "batch", f"building a batch of {spec.batch_size}")
        build = build_batch(spec, rows, processor, forward_inputs(loaded.model),
                            getattr(loaded.model, "main_input_name", "input_ids"),
                            loaded.device, cancel)
    _check_positions(spec, loaded.model.config, processor, build.batch)
    _add_decoder_inputs(loaded.model, build.batch)
    return build


def _check_positions(spec: PipelineSpec, config, processor, batch: dict):
    # truncation=True cuts at the tokenizer's model_max_length; a tokenizer saved without one
    # lets texts run past a learned position table, which fails deep in the embeddings with
    # "The size of tensor a (221) must match the size of tensor b (64)". Say it plainly.
    ids = batch.get("input_ids")
    limit = getattr(config, "max_position_embeddings", None)
    learned = not any(getattr(config, key, None) for key in
                      ("rope_theta", "rope_scaling", "rope_parameters"))
    if ids is None or not limit or not learned or ids.shape[-1] <= limit:
        return
    if getattr(processor, "model_max_length", 0) <= limit:
        return
    raise InputError(f"dataset {spec.dataset!r}: texts are {ids.shape[-1]} tokens but model "
                     f"{spec.model!r} takes at most {limit} positions, and its tokenizer does not "
                     f"truncate (no model_max_length): set \"model_max_length\": {limit} in the "
                     "model's tokenizer_config.json, as the model's own tokenizer would")


def prepare(spec: PipelineSpec, progress=None, cancel=None) -> Prepared:
    """Load the model and build one batch exactly as the spec describes."""
    try:
        loaded, processor = prepare_model(spec, progress)
    except DeviceUnavailable:
        raise InputError(f"device {spec.device!r} is not available on this machine") from None
    check_cancel(cancel)
    build = prepare_batch(spec, loaded, processor, progress, cancel)
    return Prepared(spec=spec, loaded=loaded, processor=processor, build=build)


def _add_decoder_inputs(model, batch: dict):
    # Encoder-decoder models need a decoder start; users pass labels or decoder_input_ids.
    # Keyed on the main input, so Whisper (input_features) and vision encoder-decoders
    # (pixel_values) get one too.
    config = model.config
    if not getattr(config, "is_encoder_decoder", False) or "labels" in batch:
        return
    main = batch.get(getattr(model, "main_input_name", "input_ids"))
    if "decoder_input_ids" in batch or main is None or not hasattr(main, "shape"):
        return
    import torch

    start = getattr(config, "decoder_start_token_id", None) or 0
    batch["decoder_input_ids"] = torch.full((main.shape[0], 1), start, dtype=torch.long,
                                            device=main.device)


def autocast_context(spec: PipelineSpec, device):
    import torch

    if not spec.autocast:
        return contextlib.nullcontext()
    # The device type the user's autocast names. Named for a device this machine lacks it only
    # warns and does nothing: that is autocast-inactive's finding, so the warning is not repeated.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.autocast(spec.autocast_device or device.type,
                              dtype=dtypes.to_torch(spec.autocast))


def run_forward(spec: PipelineSpec, model, batch: dict, device, inference: bool = True):
    """The forward pass under the spec's autocast, without autograd: in inference mode, or with
    `inference=False` under no_grad, whose tensors keep version counters (the tracer uses them
    to measure a tensor seen again, unchanged, once)."""
    import torch

    with torch.inference_mode() if inference else torch.no_grad(), \
            autocast_context(spec, device):
        return model(**batch)


def forward(prepared: Prepared):
    """The forward pass of a prepared pipeline, in the calling thread."""
    return run_forward(prepared.spec, prepared.model, prepared.batch, prepared.device)


def no_tensor(output) -> str:
    """What to say of a forward pass that returned no tensor at all."""
    return f"the model returned no tensor (its forward returned {type(output).__name__})"


def primary_output(output):
    """(name, tensor) of the output a user looks at: logits, else the first tensor."""
    import torch

    if torch.is_tensor(output):
        return "output", output
    if not (hasattr(output, "items") or isinstance(output, (list, tuple))):
        return None, None  # a forward that returns a number, None, a string: no tensor
    items = output.items() if hasattr(output, "items") else enumerate(output)
    pairs = [(str(k), v) for k, v in items if torch.is_tensor(v)]
    for name, value in pairs:
        if name in ("logits", "last_hidden_state"):
            return name, value
    return pairs[0] if pairs else (None, None)

