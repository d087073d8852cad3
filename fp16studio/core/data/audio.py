"""Audio as users feed it to a feature extractor: decoded, mono, float32, at one sampling rate.

datasets 5 decodes its `Audio` feature with torchcodec, which needs a system FFmpeg (and its
`audiofolder` builder needs torchcodec even to *store* a file), so neither works from a plain
pip install. Columns therefore stay `Audio(decode=False)` (path and bytes, no torchcodec) and are
decoded here with soundfile (libsndfile ships in its wheel: wav, flac, ogg, mp3), resampled with
scipy's polyphase filter. The exported script carries the same two functions.
"""

from __future__ import annotations

from pathlib import Path

from ..common.errors import InputError, first_line

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3"}


def folder_rows(folder: Path):
    """A folder of audio files as rows: `audio` (path, undecoded) and, when the files sit in
    two or more sub-folders, a `label` ClassLabel named after them (as audiofolder does)."""
    import datasets

    paths = sorted(p for p in folder.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES)
    names = sorted({p.parent.name for p in paths})
    columns = {"audio": [str(p) for p in paths]}
    if len(names) > 1:
        columns["label"] = [names.index(p.parent.name) for p in paths]
    # Cast after building: from_dict(features=Audio) would encode, which needs torchcodec.
    ds = datasets.Dataset.from_dict(columns).cast_column("audio", datasets.Audio(decode=False))
    if len(names) > 1:
        ds = ds.cast_column("label", datasets.ClassLabel(names=names))
    return ds


def undecoded(ds, column: str):
    """The dataset with `column` as path/bytes when it is an `Audio` feature (see module doc)."""
    import datasets

    if isinstance(ds.features[column], datasets.Audio) and ds.features[column].decode:
        return ds.cast_column(column, datasets.Audio(decode=False))
    return ds


def decode(value, rate: int):
    """One audio cell (path/bytes, or an already decoded {"array", "sampling_rate"}) as a mono
    float32 array at `rate`."""
    import io
    from math import gcd

    import numpy as np

    if isinstance(value, dict) and value.get("array") is not None:
        array, source = np.asarray(value["array"], dtype=np.float32), int(value["sampling_rate"])
    else:
        import soundfile

        path = value.get("path") if isinstance(value, dict) else value
        data = value.get("bytes") if isinstance(value, dict) else None
        try:
            array, source = soundfile.read(io.BytesIO(data) if data else path, dtype="float32",
                                           always_2d=True)
        except (soundfile.LibsndfileError, OSError, TypeError) as exc:
            raise InputError(f"audio {Path(str(path)).name if path else '(bytes)'}: cannot be "
                             f"decoded ({first_line(exc)})") from None
        array = array.mean(axis=1)
    if array.ndim > 1:
        array = array.mean(axis=0)
    if source != rate:
        from scipy.signal import resample_poly

        step = gcd(source, rate)
        array = resample_poly(array, rate // step, source // step).astype(np.float32)
    return array


def extractor_kwargs(processor) -> dict:
    """What users pass with the arrays: Whisper pads to its 30 s window itself (padding=True
    would break its fixed input length); other extractors need padding to make one batch."""
    return {} if hasattr(processor, "nb_max_frames") else {"padding": True}
