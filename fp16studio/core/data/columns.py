"""Which column plays which role (text, image, audio, label) and what dtype it is stored in."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.errors import InputError
from ..spec.value import PipelineSpec


LABEL_NAMES = ("label", "labels", "class", "target", "category")
TEXT_NAMES = ("text", "sentence", "sentence1", "question", "premise", "content", "document")
PAIR_NAMES = ("text_pair", "sentence2", "context", "hypothesis", "passage")


@dataclass
class ColumnFacts:
    """What happened to one batch entry on its way to the model."""

    name: str
    role: str | None = None          # text, text_pair, image, label; None for processor outputs
    stored: str | None = None        # dtype of the Arrow feature (what `map` stored)
    intended: str | None = None      # dtype a cast in `map` or the user's function asked for
    loaded: str | None = None        # dtype out of the DataLoader, or "list"
    final: str | None = None         # dtype fed to the model
    device: str | None = None
    shape: tuple | None = None


def detect_columns(ds, spec: PipelineSpec, preprocessed: bool = True) -> dict:
    """role -> column name: the spec's own choices first, then by feature type and name.
    `preprocessed`: `ds` is what the model's inputs are made from, after the spec's preprocess
    (when it has one), so a column the spec names must be there; export, which never runs the
    preprocess, reads the rows before it and leaves that check to the script it writes."""
    import datasets

    features = ds.features
    names = list(features)
    for role, column in spec.columns.items():
        if column not in features and (preprocessed or not spec.preprocess):
            raise InputError(f"columns.{role}: dataset has no column {column!r} "
                             f"(columns: {', '.join(names)})")
    roles = dict(spec.columns)
    taken = set(roles.values())

    def pick(role, test):
        if role in roles:
            return
        for name in names:
            if name not in taken and test(name, features[name]):
                roles[role] = name
                taken.add(name)
                return

    pick("image", lambda n, f: isinstance(f, datasets.Image))
    pick("audio", lambda n, f: isinstance(f, datasets.Audio))
    # A column named labels is what the model takes as such (a causal LM's labels = input_ids,
    # made by the preprocess), before any other label-like column.
    pick("label", lambda n, f: n == "labels" and (feature_dtype(f) or "").startswith("int"))
    pick("label", lambda n, f: isinstance(f, datasets.ClassLabel))
    pick("label", lambda n, f: n.lower() in LABEL_NAMES and _is_int_value(f))
    # Multi-hot label vectors (multi-label classification): a list of numbers per row.
    pick("label", lambda n, f: n.lower() in LABEL_NAMES and _is_number_list(f))
    # Class ids a CSV gives back as floats (0.0/1.0) are still the user's labels.
    pick("label", lambda n, f: n.lower() in LABEL_NAMES and isinstance(f, datasets.Value)
         and f.dtype.startswith("float"))
    is_text = lambda f: isinstance(f, datasets.Value) and f.dtype in ("string", "large_string")  # noqa: E731
    pick("text", lambda n, f: n.lower() in TEXT_NAMES and is_text(f))
    pick("text_pair", lambda n, f: n.lower() in PAIR_NAMES and is_text(f))
    pick("text", lambda n, f: is_text(f))
    if spec.with_labels and "label" not in roles:
        _refuse_string_labels(spec, [n for n in names if n.lower() in LABEL_NAMES
                                     and is_text(features[n])])
    return roles


def _refuse_string_labels(spec: PipelineSpec, named: list) -> None:
    """A column named like labels that holds strings: the model takes class ids, and saying
    "no label column" would send the user looking for a column that is there."""
    if not named:
        return
    column = named[0]
    raise InputError(f"with_labels is on, and dataset {spec.dataset!r} has a {column!r} column, "
                     f"but it holds strings where the model takes class ids "
                     f"(whole numbers): make it a ClassLabel (dataset.class_encode_column("
                     f"{column!r})) or map each name to its id, or set with_labels to false")


def _is_number_list(feature) -> bool:
    import datasets

    # datasets 4 calls a list feature List; 3 calls it Sequence (4 keeps that name too).
    lists = tuple(getattr(datasets, name) for name in ("List", "Sequence") if hasattr(datasets, name))
    inner = getattr(feature, "feature", None)
    return (isinstance(feature, lists) and isinstance(inner, datasets.Value)
            and inner.dtype.startswith(("int", "uint", "bool", "float")))


def _is_int_value(feature) -> bool:
    import datasets

    return isinstance(feature, datasets.Value) and feature.dtype.startswith(("int", "uint", "bool"))


def check_roles(spec: PipelineSpec, columns, roles: dict, processor, main_input: str):
    """Bad input the processor step would trip over, said before any work is done."""
    if spec.with_labels and "label" not in roles:
        raise InputError(f"with_labels is on, but dataset {spec.dataset!r} has no label column "
                         "(set columns.label)")
    if processor_roles(processor)[1:]:
        missing = [r for r in processor_roles(processor) if r not in roles]
        if missing and main_input not in columns:
            raise InputError(f"model {spec.model!r} takes {' and '.join(processor_roles(processor))}"
                             f" together, but dataset {spec.dataset!r} has no {missing[0]} column "
                             f"(columns: {', '.join(columns)}); set columns.{missing[0]}")
        return
    wants = processor_input(processor)
    rate = getattr(processor, "sampling_rate", None)
    if wants == "audio" and spec.sampling_rate and rate and spec.sampling_rate != rate:
        # The extractor would refuse it with a multi-line message; say it in one.
        raise InputError(f"sampling_rate is {spec.sampling_rate} but the model's feature "
                         f"extractor takes {rate} Hz audio: set sampling_rate to {rate} (or null)")
    if main_input in columns or wants in roles:
        return
    media = [role for role in ("text", "image", "audio") if role in roles]
    if media:
        raise InputError(f"model {spec.model!r} takes {wants} (its processor is "
                         f"{type(processor).__name__}), but dataset {spec.dataset!r} has "
                         f"{' and '.join(media)}, no {wants} column: pick a {wants} dataset or "
                         f"a model for {media[0]}")
    raise InputError(f"dataset {spec.dataset!r}: no {wants} column to process "
                     f"(columns: {', '.join(columns)}); set columns.{wants}")


def processor_roles(processor) -> tuple:
    """The roles a processor takes: ("text", "image") or ("text", "audio") for a multimodal
    processor (a tokenizer beside an image processor or feature extractor), else one."""
    if getattr(processor, "tokenizer", None) is not None:
        if getattr(processor, "image_processor", None) is not None:
            return ("text", "image")
        if getattr(processor, "feature_extractor", None) is not None:
            return ("text", "audio")
    return (processor_input(processor),)


def processor_input(processor) -> str:
    """The role a processor makes the model's main input from: text, image or audio."""
    if hasattr(processor, "sampling_rate") and hasattr(processor, "feature_size"):
        return "audio"
    if hasattr(processor, "tokenize") or hasattr(processor, "encode"):
        return "text"
    return "image"


def feature_dtype(feature) -> str | None:
    """The scalar dtype inside an Arrow feature (Value, List, Sequence, ArrayXD, ClassLabel)."""
    import datasets

    if isinstance(feature, datasets.ClassLabel):
        return "int64"
    if isinstance(feature, datasets.Value):
        return feature.dtype
    inner = getattr(feature, "feature", None)
    if inner is not None:
        return feature_dtype(inner)
    return getattr(feature, "dtype", None)
