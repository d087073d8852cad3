"""What an exported script must do, decided from a spec (no weights read, no text written).

`export_plan` resolves what the spec leaves open the way the pipeline resolves it (model class,
processor, columns, how the split is read, which layers FP8 converts) and what the spec implies
(float32 islands that act, master weights that need a float32 copy), once, into typed fields.
`core/present/export.py` writes the script from this plan alone. The plan never leaves the
process that renders it, so it is plain frozen dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..common.errors import InputError
from ..common.float8 import RECIPE_CAPABILITY
from ..spec.value import PipelineSpec

OPTIMIZER_CLASSES = {"adamw": "AdamW", "adam": "Adam", "sgd": "SGD"}


@dataclass(frozen=True)
class FixNote:
    """An applied fix, as the script names it: in the list at its top, and where it acts."""

    id: str
    title: str
    explain: str | None
    edits: frozenset[str]     # the spec keys it edited (empty when the engine did not record them)


@dataclass(frozen=True)
class Fp8Conversion:
    """The Linear layers torchao converts to FP8: an FP8 plan's (for the whole script) or the
    spec's `train.fp8` (for its training steps only)."""

    recipe: str
    converted: tuple[str, ...]
    keep_bf16: tuple[str, ...]
    training: bool

    @property
    def capability(self) -> tuple[int, int]:
        """The compute capability the recipe runs natively from; below it, emulated."""
        return RECIPE_CAPABILITY[self.recipe]


@dataclass(frozen=True)
class Rows:
    """How the script reads the split's rows."""

    # by-name: load_dataset of a Hub id, or of a folder datasets reads itself; file: its
    # data_files=; folder: data_dir= with a builder (images); saved / saved-dict: load_from_disk
    # (a DatasetDict indexed by the split); audio-folder: the app's own folder reader;
    # synthetic: made up from the model config.
    kind: Literal["by-name", "file", "folder", "saved", "saved-dict", "audio-folder", "synthetic"]
    ref: str | None               # absolute local path or the Hub id; None when synthetic
    split: str
    config: str | None            # the dataset config, for a load by name
    builder: str | None           # load_dataset's builder for a file or a folder
    # audio-folder: the app's own reader (its source, copied verbatim) and the suffixes it reads
    folder_reader: str | None = None
    audio_suffixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SyntheticRows:
    """What `dataset: synthetic` makes for this model (the run makes the same)."""

    kind: Literal["text", "image"]
    num_labels: int
    side: int | None              # images: their side in pixels
    texts: tuple[str, ...]        # texts: the sentences cycled through


@dataclass(frozen=True)
class Columns:
    """The rows' column for each role (None: the rows have none)."""

    text: str | None = None
    text_pair: str | None = None
    image: str | None = None
    audio: str | None = None
    label: str | None = None


@dataclass(frozen=True)
class AudioInput:
    """Audio the processor gets: decoded as the app decodes it, at its sampling rate."""

    column: str
    rate: int
    kwargs: dict          # what users pass with the arrays (padding=True, or nothing for Whisper)
    undecode: tuple[str, ...]   # stored Audio columns cast to Audio(decode=False) first
    decoder: str                # the app's own decode function, its source copied verbatim


@dataclass(frozen=True)
class Labels:
    """`with_labels`: where the "labels" the model's loss takes come from."""

    column: str | None            # the rows' label column; None: the preprocess function makes it
    candidates: tuple[str, ...]   # column None: the names the function's label may have
    # A "labels" column that is not the label: never there, there (dropped), or maybe made by
    # the preprocess function (dropped if there).
    drop_existing: Literal["never", "always", "if-present"]


@dataclass(frozen=True)
class TrainStep:
    """The spec's `train`, as the script's loop runs it (CONTRACT §1)."""

    steps: int
    optimizer_class: str          # torch.optim's class
    lr: float
    eps: float | None             # None: the optimizer's default (SGD takes none)
    grad_scaler: bool
    clip_grad_norm: float | None
    clip_before_unscale: bool     # the user's wrong order, reproduced
    master_weights: bool          # asked for
    master_copies: bool           # asked for over half weights: a float32 copy is updated


@dataclass(frozen=True)
class ExportPlan:
    """Everything the exported script does, decided; the spec for the settings it writes as
    they are (samples, dtypes, devices, format)."""

    spec: PipelineSpec
    model_ref: str                # absolute local folder, or the Hub id
    model_class: str              # the transformers class used for from_pretrained
    load_dtype: str               # from_pretrained's dtype= ("auto" or a dtype name)
    islands: tuple[str, ...]      # run_in_float32 patterns that act (a half model), else ()
    processor_class: str | None   # None when the rows already hold the model's main input
    main_input: str               # the model's main input name (input_ids, pixel_values...)
    # What the processor gets: texts and images at once, audio, images, texts, or nothing the
    # rows hold (only with a preprocess function, which must make the input).
    processor_input: Literal["text-and-image", "audio", "image", "text", "none"]
    rows: Rows
    columns: Columns
    fixes: tuple[FixNote, ...]    # oldest first
    synthetic: SyntheticRows | None = None
    audio: AudioInput | None = None
    labels: Labels | None = None  # None: no with_labels
    preprocess: tuple[str, str] | None = None   # (absolute file, function name)
    decoder_start: int | None = None   # encoder-decoder models: the decoder start token
    train: TrainStep | None = None
    fp8: Fp8Conversion | None = None

    @property
    def island_dtype(self) -> str:
        """The half dtype the model outside the islands runs in ("auto": the checkpoint's)."""
        return self.spec.model_cast or self.spec.model_dtype

    @property
    def cast_after_load(self) -> str | None:
        """The whole-model cast after loading (model_cast); with islands, they cast the rest."""
        return None if self.islands else self.spec.model_cast


def export_plan(spec: PipelineSpec, fp8: Fp8Conversion | None = None) -> ExportPlan:
    """The plan of `spec`'s script (`fp8`: an FP8 plan's layers, converted for the whole
    script). Reads the model's config and the dataset's rows, never the weights."""
    import inspect

    import torch
    import transformers

    from ..data import audio, columns, sources, user_code
    from ..hf import loading
    from .float8 import fp8_layers

    with loading.quiet_hf():
        folder = loading.model_folder(spec)
        config = loading.load_config(folder, spec)
        task, arch = loading.resolve_task(config, spec)
        model_class = loading.model_class_name(spec, task, arch)
        cls = getattr(transformers, model_class)
        # A skeleton on the meta device: the real model class, its main input, no memory.
        with torch.device("meta"):
            skeleton = (cls.from_config(config, trust_remote_code=spec.trust_remote_code)
                        if model_class.startswith("Auto") else cls(config))
        processor = loading.load_processor(folder, skeleton, spec)
        rows = sources.load_rows(spec, config, processor)
        roles = columns.detect_columns(rows, spec, preprocessed=False)
    main_input = getattr(skeleton, "main_input_name", "input_ids")
    preprocess = None
    if spec.preprocess:
        # Never run the user's code to learn its columns (CONTRACT §6): the script checks at run
        # time whether the function already made the model's input.
        preprocess = (str(user_code.preprocess_file(spec).resolve()),
                      spec.preprocess.rpartition(":")[2])
    else:
        columns.check_roles(spec, rows.column_names, roles, processor, main_input)
    multimodal = columns.processor_roles(processor)[1:]
    if multimodal == ("audio",):
        raise InputError("export: a processor that takes text and audio together (CLAP-like) "
                         "cannot be exported yet; diagnose runs it")
    source = _rows(spec)
    audio_input = None
    if columns.processor_input(processor) == "audio" and "audio" in roles:
        audio_input = AudioInput(
            column=roles["audio"], kwargs=audio.extractor_kwargs(processor),
            rate=spec.sampling_rate or processor.sampling_rate,
            decoder=inspect.getsource(audio.decode),
            # A folder's rows are undecoded already; a stored Audio column needs the cast.
            undecode=() if source.kind == "audio-folder" else tuple(
                c for c in rows.column_names if _is_audio(rows, c)))
    if multimodal == ("image",):
        processor_input = "text-and-image"
    elif audio_input:
        processor_input = "audio"
    elif "image" in roles and hasattr(processor, "size"):
        processor_input = "image"
    elif roles.get("text"):
        processor_input = "text"
    else:  # only with a preprocess (else check_roles refused): its function must make the input
        processor_input = "none"
    local_model = spec.local_path(spec.model)
    train = spec.train
    if fp8 is None and train and train["fp8"]:   # the layers the app's training steps convert
        keep = tuple(train["fp8_keep"])
        fp8 = Fp8Conversion(train["fp8"], tuple(fp8_layers(skeleton, keep)), keep, training=True)
    return ExportPlan(
        spec=spec,
        model_ref=str(local_model.resolve()) if local_model else spec.model,
        model_class=model_class,
        load_dtype="float32" if loading.islands_load_float32(spec) else spec.model_dtype,
        islands=_acting_islands(spec),
        processor_class=(None if main_input in rows.column_names
                         else loading.processor_class(skeleton)),
        main_input=main_input,
        processor_input=processor_input,
        rows=source,
        columns=Columns(**roles),
        fixes=tuple(FixNote(str(fix["id"]), str(fix["title"]), fix.get("explain") or None,
                            frozenset(fix.get("edits") or ()))
                    for fix in spec.applied_fixes),
        synthetic=_synthetic(config, processor) if source.kind == "synthetic" else None,
        audio=audio_input,
        labels=_labels(spec, roles, rows.column_names) if spec.with_labels else None,
        preprocess=preprocess,
        decoder_start=((getattr(config, "decoder_start_token_id", None) or 0)
                       if getattr(config, "is_encoder_decoder", False) else None),
        train=_train(spec),
        fp8=fp8,
    )


def _acting_islands(spec: PipelineSpec) -> tuple[str, ...]:
    """run_in_float32 acts on a half model; on a float32 one it has nothing to do."""
    half = spec.model_dtype != "float32" or bool(spec.model_cast)
    return tuple(spec.run_in_float32) if half else ()


def _is_audio(rows, column: str) -> bool:
    import datasets

    return isinstance(rows.features[column], datasets.Audio)


def _rows(spec: PipelineSpec) -> Rows:
    import inspect

    from ..data import audio, sources

    source = sources.data_source(spec)
    if source.kind == "synthetic":
        return Rows("synthetic", None, spec.split, None, None)
    if source.kind == "hub":  # datasets finds it in its cache or downloads it
        return Rows("by-name", spec.dataset, spec.split, spec.dataset_config, None)
    ref = str(source.path.resolve())
    if source.kind == "audio":   # audiofolder needs torchcodec: see core/data/audio.py
        return Rows("audio-folder", ref, spec.split, None, None,
                    inspect.getsource(audio.folder_rows), tuple(sorted(audio.AUDIO_SUFFIXES)))
    kind = {"file": "file", "saved-dict": "saved-dict", "saved": "saved"}.get(source.kind)
    if kind is None:   # a folder: by its builder when one reads it, else as datasets finds it
        kind = "folder" if source.builder else "by-name"
    return Rows(kind, ref, spec.split, spec.dataset_config, source.builder)


def _synthetic(config, processor) -> SyntheticRows:
    from ..data.sources import SYNTHETIC_TEXTS, synthetic_plan

    facts = synthetic_plan(config, processor)
    return SyntheticRows(facts["kind"], facts["num_labels"], facts.get("side"),
                         tuple(SYNTHETIC_TEXTS))


def _labels(spec: PipelineSpec, roles: dict, row_columns) -> Labels:
    from ..data.columns import LABEL_NAMES

    label = roles.get("label")
    if label is None:   # only with a preprocess (else check_roles refused): its function makes them
        names = (spec.columns["label"],) if "label" in spec.columns else tuple(LABEL_NAMES)
        return Labels(None, names, "if-present")
    if label == "labels":
        drop = "never"
    elif spec.preprocess:   # the function may have made a labels column of its own
        drop = "if-present"
    else:
        drop = "always" if "labels" in row_columns else "never"
    return Labels(label, (), drop)


def _train(spec: PipelineSpec) -> TrainStep | None:
    t = spec.train
    if not t:
        return None
    weights_float32 = spec.model_dtype == "float32" and spec.model_cast in (None, "float32")
    return TrainStep(
        steps=t["steps"], optimizer_class=OPTIMIZER_CLASSES[t["optimizer"]], lr=t["lr"],
        eps=t["eps"] if t["optimizer"] != "sgd" else None, grad_scaler=t["grad_scaler"],
        clip_grad_norm=t["clip_grad_norm"], clip_before_unscale=t["clip_before_unscale"],
        master_weights=t["master_weights"],
        master_copies=t["master_weights"] and not weights_float32)
