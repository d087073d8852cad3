"""Audio pipelines: folders of audio files and Audio columns, decoded from a pip install alone
(soundfile), resampled to `sampling_rate`, through Whisper's and Wav2Vec2's feature extractors."""

from pathlib import Path

import datasets
import pytest

from fp16studio.core import InputError, PipelineSpec, apply_fix, diagnose
from fp16studio.core.run.pipeline import prepare


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    from zoo import write_clips

    return write_clips(tmp_path_factory.mktemp("clips"))


def spec_for(model, dataset, **keys):
    return PipelineSpec.from_dict({"model": str(model), "dataset": str(dataset), **keys})


def test_an_audio_folder_feeds_the_whisper_extractor_and_the_decoder_starts(zoo, clips):
    prepared = prepare(spec_for(zoo["whisper"], clips))
    assert prepared.columns == {"audio": "audio", "label": "label"}
    features = prepared.batch["input_features"]
    assert features.dtype.is_floating_point and tuple(features.shape) == (4, 16, 100)
    # Whisper has no input_ids: the decoder start is built from its main input.
    assert prepared.batch["decoder_input_ids"].tolist() == [[1]] * 4
    report = diagnose(spec_for(zoo["whisper"], clips))
    assert report.ok and report.output.name == "logits"


def test_wav2vec2_gets_input_values_resampled_to_the_extractor_rate(zoo, clips):
    prepared = prepare(spec_for(zoo["wav2vec2"], clips, with_labels=True))
    # The clips are 8 kHz, 1.0 to 1.3 s: padded to the longest, at the extractor's 16 kHz.
    assert tuple(prepared.batch["input_values"].shape) == (4, 20800)
    # Files in path order (no/ first); the sub-folder names are the classes: no 0, yes 1.
    assert prepared.batch["labels"].tolist() == [0, 0, 1, 1]


def test_sampling_rate_is_the_rate_audio_is_resampled_to(zoo, clips):
    prepared = prepare(spec_for(zoo["wav2vec2"], clips, sampling_rate=16000))
    assert tuple(prepared.batch["input_values"].shape) == (4, 20800)
    # Resampled to 8 kHz for a 16 kHz extractor: said in one line, before any work.
    with pytest.raises(InputError, match="sampling_rate is 8000 .* takes 16000 Hz"):
        prepare(spec_for(zoo["wav2vec2"], clips, sampling_rate=8000))


@pytest.mark.parametrize("suffixes", [("ogg", "mp3")])
def test_ogg_and_mp3_decode_without_ffmpeg(zoo, tmp_path, suffixes):
    from zoo import write_clips

    folder = write_clips(tmp_path, suffixes)
    assert diagnose(spec_for(zoo["wav2vec2"], folder)).ok


def test_a_saved_audio_column_is_decoded_without_torchcodec(zoo, clips, tmp_path):
    paths = sorted(str(p) for p in clips.rglob("*.*"))
    ds = datasets.Dataset.from_dict({"speech": paths, "label": [0, 1, 0, 1]})
    ds.cast_column("speech", datasets.Audio()).save_to_disk(str(tmp_path / "saved"))
    prepared = prepare(spec_for(zoo["wav2vec2"], tmp_path / "saved", columns={"audio": "speech"}))
    assert prepared.batch["input_values"].shape[0] == 4


def test_half_audio_model_fed_float32_features_is_fixed_by_casting_the_inputs(zoo, clips):
    spec = spec_for(zoo["wav2vec2"], clips, model_dtype="bfloat16")
    report = diagnose(spec)
    f = next(f for f in report.findings if f.code == "dtype-mismatch")
    assert f.location == "wav2vec2.feature_extractor.conv_layers.0.conv"
    assert f.fixes[0].id == "cast-inputs-bfloat16"
    fixed = diagnose(apply_fix(spec, f.fixes[0]))
    assert fixed.ok and fixed.output.dtype == "bfloat16"


def test_a_text_model_given_audio_says_so(demo_dir, clips):
    with pytest.raises(InputError, match="takes text .* has audio"):
        prepare(spec_for(demo_dir / "models/tiny-bert", clips))


def test_an_audio_model_given_text_says_so(demo_dir, zoo):
    with pytest.raises(InputError, match="takes audio .* has text"):
        prepare(spec_for(zoo["wav2vec2"], demo_dir / "data/texts.jsonl"))


def test_a_file_that_is_not_audio_is_bad_input(zoo, clips, tmp_path):
    import shutil

    shutil.copytree(clips, tmp_path / "clips")
    (tmp_path / "clips" / "yes" / "broken.wav").write_bytes(b"not a wave file")
    with pytest.raises(InputError, match="broken.wav: cannot be decoded"):
        prepare(spec_for(zoo["wav2vec2"], tmp_path / "clips"))


def test_rows_read_from_a_saved_audio_column_can_be_iterated(clips, tmp_path):
    # What the window's preview does with them: datasets would decode with torchcodec here.
    from fp16studio.core.data.sources import load_rows

    paths = sorted(str(p) for p in clips.rglob("*.*"))
    datasets.Dataset.from_dict({"audio": paths}).cast_column(
        "audio", datasets.Audio()).save_to_disk(str(tmp_path / "saved"))
    rows = load_rows(PipelineSpec(model="m", dataset=str(tmp_path / "saved")))
    # save_to_disk embedded the files' bytes; decoding reads those.
    assert [row["audio"]["path"] for row in rows] == [Path(p).name for p in paths]
    assert all(row["audio"]["bytes"] for row in rows)
