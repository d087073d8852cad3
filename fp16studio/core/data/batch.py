"""Building one batch, step by step as the spec describes the pipeline.

Each step does what users write themselves (a cast inside `Dataset.map`, `with_format`, a
`DataLoader`, `.to(...)` on the batch), so their mistakes happen here too and can be diagnosed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..common import dtypes
from ..common.errors import InputError, PipelineFailure, check_cancel, first_line
from ..spec.value import PipelineSpec
from . import audio
from .columns import ColumnFacts, check_roles, detect_columns, feature_dtype, processor_input, processor_roles
from .user_code import load_user_function


@dataclass
class BatchBuild:
    batch: dict
    columns: dict                     # role -> column name as resolved
    facts: dict = field(default_factory=dict)   # batch key -> ColumnFacts


def build_batch(spec: PipelineSpec, ds, processor, model_inputs: set, main_input: str,
                device, cancel=None) -> BatchBuild:
    """Run the data half of the pipeline and return the batch the model would receive."""
    import datasets
    import torch

    facts: dict[str, ColumnFacts] = {}
    try:
        if spec.preprocess:
            function = load_user_function(spec)
            # Call it once directly to see the half casts it makes before Arrow stores them.
            for key, value in dict(function(dict(ds[0]))).items():
                if torch.is_tensor(value) and dtypes.name_of(value.dtype) in dtypes.HALF_NAMES:
                    facts[key] = ColumnFacts(key, intended=dtypes.name_of(value.dtype))
            ds = ds.map(function)
        # After the preprocess: the columns it makes (labels = input_ids, a rename) count too.
        roles = detect_columns(ds, spec)
        check_cancel(cancel)
        check_roles(spec, ds.column_names, roles, processor, main_input)
        if main_input not in ds.column_names:
            ds = _apply_processor(spec, ds, processor, roles)
            if spec.map_dtype:
                for key, feature in ds.features.items():
                    if feature_dtype(feature) and dtypes.is_floating_name(feature_dtype(feature)):
                        facts.setdefault(key, ColumnFacts(key)).intended = spec.map_dtype
        ds = _select_model_columns(spec, ds, roles, model_inputs)
        for key, feature in ds.features.items():
            facts.setdefault(key, ColumnFacts(key)).stored = feature_dtype(feature)
            if key == "labels":
                facts[key].role = "label"
        if spec.format == "torch":
            kwargs = {"dtype": dtypes.to_torch(spec.format_dtype)} if spec.format_dtype else {}
            ds = ds.with_format("torch", **kwargs)
        loader = torch.utils.data.DataLoader(ds, batch_size=spec.batch_size, shuffle=False)
        batch = dict(next(iter(loader)))
    except (InputError, datasets.exceptions.DatasetsError) as exc:
        raise exc if isinstance(exc, InputError) else InputError(first_line(exc)) from None
    except Exception as exc:  # the user's own code or casts failed: that is the diagnosis
        raise PipelineFailure("batch", exc, facts) from exc
    for key, value in batch.items():
        fact = facts.setdefault(key, ColumnFacts(key))
        fact.loaded = dtypes.name_of(value.dtype) if torch.is_tensor(value) else "list"
    try:
        batch = prepare_inputs(spec, batch, device, facts)
    except Exception as exc:
        raise PipelineFailure("batch", exc, facts) from exc
    return BatchBuild(batch=batch, columns=roles, facts=facts)


def prepare_inputs(spec: PipelineSpec, batch: dict, device, facts: dict) -> dict:
    """`input_dtype` / `input_cast`, then the move to `input_device`, as users write them."""
    import torch

    target = device if spec.input_device == "model" else torch.device(spec.input_device)
    out = {}
    for key, value in batch.items():
        if spec.input_dtype and (not torch.is_tensor(value) or value.is_floating_point()
                                 or spec.input_cast == "all"):
            # On a list this raises just what users see: 'list' object has no attribute 'to'.
            value = value.to(dtypes.to_torch(spec.input_dtype))
        out[key] = value.to(target)
    if spec.label_dtype and torch.is_tensor(out.get("labels")):
        # The user's labels.long() / labels.float() before the loss.
        out["labels"] = out["labels"].to(dtypes.to_torch(spec.label_dtype))
    for key, value in out.items():
        facts[key].final = dtypes.name_of(value.dtype)
        facts[key].device = str(value.device)
        facts[key].shape = tuple(value.shape)
    return out


def _apply_processor(spec: PipelineSpec, ds, processor, roles: dict):
    import torch

    map_dtype = dtypes.to_torch(spec.map_dtype) if spec.map_dtype else None
    image, text, pair = roles.get("image"), roles.get("text"), roles.get("text_pair")
    wants = processor_input(processor)
    rate = spec.sampling_rate or getattr(
        getattr(processor, "feature_extractor", processor), "sampling_rate", None)

    def process(rows):
        if processor_roles(processor)[1:]:
            # A multimodal processor gets every medium at once, as users call it.
            out = processor(text=rows[text], padding=True, truncation=True, return_tensors="pt",
                            **_media_kwargs(processor, rows, roles, rate))
        elif wants == "audio":
            arrays = [audio.decode(value, rate) for value in rows[roles["audio"]]]
            out = processor(arrays, sampling_rate=rate, return_tensors="pt",
                            **audio.extractor_kwargs(processor))
        elif image is not None and wants == "image":
            out = processor(images=[img.convert("RGB") for img in rows[image]], return_tensors="pt")
        else:
            args = (rows[text], rows[pair]) if pair else (rows[text],)
            out = processor(*args, padding=True, truncation=True, return_tensors="pt")
        out = dict(out)
        if map_dtype is not None:
            # What users write inside map; datasets stores it in Arrow and may give float32 back.
            out = {k: v.to(map_dtype) if torch.is_tensor(v) and v.is_floating_point() else v
                   for k, v in out.items()}
        return out

    # One map call over all rows, so text pads to one length and the batch collates.
    return ds.map(process, batched=True, batch_size=None)


def _media_kwargs(processor, rows, roles: dict, rate) -> dict:
    if processor_roles(processor)[1] == "image":
        return {"images": [img.convert("RGB") for img in rows[roles["image"]]]}
    return {"audio": [audio.decode(value, rate) for value in rows[roles["audio"]]],
            "sampling_rate": rate}


def _select_model_columns(spec: PipelineSpec, ds, roles: dict, model_inputs: set):
    label = roles.get("label")
    if spec.with_labels:
        if label != "labels":
            if "labels" in ds.column_names:
                ds = ds.remove_columns("labels")
            ds = ds.rename_column(label, "labels")
    keep = set(model_inputs) | ({"labels"} if spec.with_labels else set())
    drop = [c for c in ds.column_names if c not in keep]
    return ds.remove_columns(drop) if drop else ds
