"""The batch's rules: what the dataset, its format and the casts did to the tensors the model
gets (list-batch, map-cast-lost, integer-cast, label-dtype)."""

from __future__ import annotations

from ...common.dtypes import HALF_NAMES, is_floating_name
from ...common.precision import INTEGER_ERRORS, LIST_ERRORS, MULTI_LABEL_ERRORS
from ...data.columns import ColumnFacts
from ..findings import Finding
from . import edits
from .evidence import Evidence
from .words import input_origin, with_origin

OWNS = ("list-batch", "map-cast-lost", "integer-cast", "label-dtype")


def rule_list_batch(ev: Evidence) -> list[Finding]:
    # String labels come back as lists whatever the format: label-dtype's story.
    lists = [k for k, f in ev.facts.items() if f.loaded == "list" and not _strings(f)]
    if not lists:
        return []
    broke = ev.failed and (LIST_ERRORS.search(ev.message) or ev.error.stage == "batch")
    return [Finding(
        "list-batch", "error" if broke else "warning", lists[0],
        f"The batch holds Python lists instead of tensors ({', '.join(lists)}): the dataset's "
        "format is 'python', so the DataLoader collates nested lists and `.to(...)` fails. Set "
        "the format to torch.",
        {"columns": lists, "format": ev.spec.format},
        (edits.format_torch(ev.sources.get("format")),))]


def rule_map_cast_lost(ev: Evidence) -> list[Finding]:
    """A cast inside Dataset.map that Arrow storage undid: a fact about the pipeline whatever
    the outcome. Where the model ran in that dtype anyway (autocast, or the batch cast again
    before the model), it is said as what saved the run."""
    out = []
    for key, fact in ev.facts.items():
        if fact.intended not in HALF_NAMES or fact.loaded in (None, "list") \
                or fact.loaded == fact.intended:
            continue  # the finding is about half casts that Arrow storage undid
        by_user = not ev.spec.map_dtype
        where = "your preprocess function" if by_user else "Dataset.map"
        recast = ev.spec.input_dtype == fact.intended
        autocast = ev.spec.autocast == fact.intended and ev.spec.autocast_device in (
            None, ev.device_type)
        message = (f"The cast of {key!r} to {fact.intended} inside {where} did not survive: "
                   f"datasets stores map results in Arrow and with_format('torch') gives "
                   f"{fact.loaded} back, so the batch travels as {fact.loaded}.")
        if autocast:
            message += (f" The run computed in {fact.intended} only because "
                        f"autocast({fact.intended}) casts each operation's inputs; the cast in "
                        "map did nothing.")
        elif recast:
            message += f" The batch is cast to {fact.intended} again before the model; the cast " \
                       "in map did nothing."
        else:
            message += " Cast right before the forward pass instead."
        if by_user:
            message += " Remove the .to() from your function: it has no effect."
        fix = edits.cast_inputs(ev.spec, fact.intended, ev.names, ev.sources.get("call"))
        fix = edits.Fix(fix.id, f"Cast {key} to {fact.intended} in the batch, not in map",
                        fix.edits, fix.explain, fix.code)
        out.append(Finding(
            "map-cast-lost", "info" if recast else "warning", key, message,
            {"cast in map": fact.intended, "stored as": fact.stored, "after DataLoader": fact.loaded,
             "autocast": ev.spec.autocast, "cast again before the model": recast},
            () if recast else (edits.drop_map_cast(fact.intended, ev.sources.get("map")),)
            if autocast else (fix,)))
    return out


def rule_integer_cast(ev: Evidence) -> list[Finding]:
    cast = [k for k, f in ev.facts.items() if _integer(f) and f.final and is_floating_name(f.final)]
    if not cast:
        return []
    broke = ev.failed and bool(INTEGER_ERRORS.search(ev.message))
    location = _received_by_failed_call(ev, cast) or next(
        (k for k in cast if k in ev.message), cast[0])
    dtype = ev.facts[location].final
    s = ev.spec
    origin = input_origin(ev, dtype, location)
    fixes = []
    if s.format_dtype and is_floating_name(s.format_dtype):
        fixes.append(edits.format_without_dtype(s, ev.sources.get("format")))
    if s.input_cast == "all":
        # At the line that cast the batch (sources["cast"] is the model's cast).
        cast_at = origin.get("source") if origin and origin.get("from") == "cast" else None
        fixes.append(edits.cast_floating_only(s.input_dtype or dtype, ev.names, cast_at))
    cause = ("with_format('torch', dtype=...) casts every column" if s.format_dtype
             else "the cast applies to every tensor of the batch")
    return [Finding(
        "integer-cast", "error" if broke else "warning", location,
        f"Integer tensors were cast to {dtype} ({', '.join(cast)}): {cause}. Token ids, attention "
        "masks and class labels must stay integer (embeddings need Long indices; float labels "
        "switch classifiers to a different loss).",
        with_origin({"columns": {k: {"stored": ev.facts[k].stored, "fed": ev.facts[k].final}
                                 for k in cast}}, origin),
        tuple(fixes))]


def _received_by_failed_call(ev: Evidence, keys: list) -> str | None:
    """The batch key whose tensor the failing module received (matched by shape and dtype)."""
    call = ev.failed_call
    if call is None:
        return None
    seen = {(t.shape, t.dtype) for t in call.inputs}
    matches = [k for k in keys if (ev.facts[k].shape, ev.facts[k].final) in seen]
    # A mask and the ids share shape and dtype; an embedding's input is the ids.
    matches.sort(key=lambda k: not (call.cls.endswith("Embedding") and k.endswith("input_ids")))
    return matches[0] if matches else None


def _strings(fact: ColumnFacts) -> bool:
    return fact.stored in ("string", "large_string")


def _integer(fact: ColumnFacts) -> bool:
    return bool(fact.stored) and fact.stored.startswith(("int", "uint", "bool"))


def rule_label_dtype(ev: Evidence) -> list[Finding]:
    fact = ev.facts.get("labels")
    if not ev.spec.with_labels or fact is None:
        return []
    column = ev.spec.columns.get("label", "labels")
    if _strings(fact):
        return [Finding(
            "label-dtype", "error" if ev.failed else "warning", "labels",
            f"The labels ({column!r}) are strings, but the loss needs integer class ids: map each "
            "name to its id (model.config.label2id) in your preprocess, or run without labels.",
            {"stored": fact.stored, "after DataLoader": fact.loaded}, (edits.no_labels(ev.names),))]
    if not (ev.failed and fact.final):
        return []
    if MULTI_LABEL_ERRORS.search(ev.message) and not is_floating_name(fact.final):
        return [_label_cast(ev, fact, "float32", "but this model is a multi-label classifier "
                            "(problem_type multi_label_classification): its BCE loss takes float "
                            "targets, one 0.0/1.0 per class")]
    if not (INTEGER_ERRORS.search(ev.message) and is_floating_name(fact.final)):
        return []
    why = (f"stored as {fact.stored} (class ids read as floats, from a CSV's 0.0/1.0)"
           if fact.stored and is_floating_name(fact.stored) else f"cast to {fact.final}")
    return [_label_cast(ev, fact, "int64", f"{why}: with floating labels a classifier picks "
                        "multi-label BCE (a target-size error), or cross-entropy refuses them")]


def _label_cast(ev: Evidence, fact: ColumnFacts, dtype: str, why: str) -> Finding:
    """label-dtype answered by casting the labels to `dtype` (int64 class ids, float32 targets)."""
    cast = {"int64": "labels.long()", "float32": "labels.float()"}[dtype]
    return Finding(
        "label-dtype", "error", "labels",
        f"The labels reach the loss as {fact.final}, {why}. Cast them with {cast} before the loss.",
        {"stored": fact.stored, "fed": fact.final, "error": ev.message},
        (edits.labels_cast(dtype, ev.names),))


def float64_targets(record) -> Finding:
    """The user's own loss call given float64 targets (numpy and pandas make float64), seen
    failing in backward (core/script/user_ops.py). `record`: name, loss, predictions, source,
    backward, message, code (their loss line with the targets cast)."""
    name = record.name
    return Finding(
        "label-dtype", "error", name,
        f"The targets ({name}) reach the loss ({record.loss}, line {record.source['line']}) as "
        f"float64 while the predictions are {record.predictions}: the loss accepted them, then "
        f"the backward pass (line {record.backward['line']}) failed ({record.message}). Cast the "
        "targets to float32 before the loss (numpy and pandas make float64 by default).",
        {"error": record.message, "targets dtype": "float64",
         "predictions dtype": record.predictions, "loss": record.loss,
         "backward": record.backward},
        (edits.written("targets-float32", "Cast the targets to float32", record.code,
                       record.source),),
        source=record.source)
