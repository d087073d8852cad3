"""The built-in demo: tiny models and datasets made from configs with fixed seeds, offline.

They reproduce the seed article's situations (a float16 cast in `map` that is lost; an fp32
model fed fp16 inputs and the reverse; PIL preprocessing that casts to half) plus a blind
`.half()` on every tensor, a model whose fp16 activations overflow, and a healthy pipeline; and
the pipelines users write beyond those: an audio folder, a whole-model `.half()`, float labels
from a CSV, autocast naming the wrong device, a bfloat16 checkpoint loaded with dtype "auto".
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..common.errors import InputError
from ..spec import trust
from ..spec.documents import load_spec
from ..spec.value import PipelineSpec

DEMO_PREFIX = "demo:"

DEMOS = {
    "map-cast": "A float16 cast written inside Dataset.map is lost; the fp16 ResNet gets float32 pixels",
    "fp16-inputs": "An fp32 ResNet fed float16 inputs",
    "fp16-model": "A ResNet cast to float16 fed the image processor's float32 pixels",
    "pil-preprocess": "Custom PIL preprocessing casts to half inside map; the fp16 model gets float32",
    "blind-half": "Every batch tensor cast to float16, token ids and mask included (BERT)",
    "vit-silent": "A ViT that casts its inputs itself: float16 pixels run silently in float32",
    "overflow": "A BERT whose float16 activations overflow to inf and NaN",
    "healthy": "A healthy pipeline: ResNet, float32, nothing to fix",
    "audio-fp16": "A Wav2Vec2 in float16 fed the feature extractor's float32 audio (a folder of wav/flac)",
    "half-t5": "model.half() on a T5 also casts the wo layers it keeps in float32: they overflow",
    "csv-labels": "Class ids read from a CSV as floats: the loss picks multi-label and fails",
    "autocast-cuda": "torch.cuda.amp.autocast() around a model on the CPU: it does nothing",
    "auto-bf16": "A bfloat16 checkpoint loaded with dtype auto, fed the processor's float32 pixels",
}
DEMO_DEFAULT = "map-cast"
_SPECS = {
    "map-cast": dict(model="models/tiny-resnet", dataset="data/images", model_dtype="float16",
                     map_dtype="float16"),
    "fp16-inputs": dict(model="models/tiny-resnet", dataset="data/images", input_dtype="float16"),
    "fp16-model": dict(model="models/tiny-resnet", dataset="data/images", model_dtype="float16"),
    "pil-preprocess": dict(model="models/tiny-resnet", dataset="data/images",
                           model_dtype="float16", preprocess="preprocess.py:custom_preprocessing"),
    "blind-half": dict(model="models/tiny-bert", dataset="data/texts.jsonl",
                       input_dtype="float16", input_cast="all"),
    "vit-silent": dict(model="models/tiny-vit", dataset="data/images", input_dtype="float16"),
    "overflow": dict(model="models/overflow-bert", dataset="data/texts.jsonl",
                     model_dtype="float16"),
    "healthy": dict(model="models/tiny-resnet", dataset="data/images"),
    "audio-fp16": dict(model="models/tiny-wav2vec2", dataset="data/clips", model_dtype="float16"),
    "half-t5": dict(model="models/overflow-t5", dataset="data/texts.jsonl", model_cast="float16"),
    "csv-labels": dict(model="models/tiny-bert", dataset="data/labels.csv", with_labels=True),
    "autocast-cuda": dict(model="models/tiny-resnet", dataset="data/images", device="cpu",
                          autocast="bfloat16", autocast_device="cuda"),
    "auto-bf16": dict(model="models/resnet-bf16", dataset="data/images", model_dtype="auto"),
}
# Bump when the demo content changes, so cached copies are rebuilt.
_BUILD = "5"
_PREPROCESS = '''\
"""The seed article's third example: PIL preprocessing that casts to half inside Dataset.map."""
import numpy as np
import torch


def custom_preprocessing(example):
    image = example["image"].convert("RGB").resize((36, 36)).crop((2, 2, 34, 34))
    array = np.asarray(image, dtype=np.float32) / 255.0          # like ToTensor()
    image_tensor = torch.from_numpy(array).permute(2, 0, 1)
    image_tensor = image_tensor.to(torch.float16)                # lost when map stores it
    example["pixel_values"] = image_tensor
    return example
'''
_WORDS = ("half precision the model expected float16 but batch held float32 a cast inside map is "
          "stored in arrow and read back integer token ids must never be to floating type "
          "autocast picks of each operation for you overflow turns large activations into inf "
          "then nan bfloat16 keeps range with fewer mantissa bits move inputs device where lives")


def open_spec(source: str | Path) -> PipelineSpec:
    """The spec a user names on the command line or in the window: a spec or session file, or
    `demo:NAME` for a built-in demo."""
    text = str(source)
    if text.startswith(DEMO_PREFIX):
        return demo_spec(text[len(DEMO_PREFIX):])
    return load_spec(text)


def demo_spec(name: str) -> PipelineSpec:
    """The built-in demo spec `name`, its files built once into the user's cache."""
    if name not in DEMOS:
        raise InputError(f"no demo {name!r} (demos: {', '.join(DEMOS)})")
    root = ensure_demo_files()
    return PipelineSpec.from_dict(dict(_SPECS[name]), base_dir=root)


def demo_cache_dir() -> Path:
    base = os.environ.get("FP16STUDIO_CACHE") or os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "fp16studio" / f"demo-{_BUILD}"


def ensure_demo_files() -> Path:
    root = demo_cache_dir()
    if (root / "complete").is_file():
        if _intact(root):
            return root
        # Damaged (files deleted by hand or by a cleaner): ours to rebuild, never a Hub lookup.
        shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".demo-", dir=root.parent))
    try:
        write_demo(staging)
        (staging / "complete").write_text(_BUILD)
        try:
            staging.rename(root)
        except OSError:  # another process finished first; theirs is as good as ours
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def _intact(root: Path) -> bool:
    """Every model, dataset and the preprocess file the demo specs name are there."""
    needed = {root / "preprocess.py"}
    for spec in _SPECS.values():
        needed |= {root / spec["model"] / "config.json", root / spec["dataset"]}
    return all(path.exists() for path in needed)


def write_demo(folder: str | Path) -> list[Path]:
    """Write models, data, the preprocess file and one spec per demo; return the spec paths.

    Never overwrites: a DIR that already holds any of these names is refused as it is.
    """
    from ..hf.loading import quiet_hf

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"demo folder {folder}: is a file, not a folder")
    targets = ["models", "data", "scripts", "preprocess.py", *(f"{name}.json" for name in _SPECS)]
    taken = [name for name in targets if (folder / name).exists() or (folder / name).is_symlink()]
    if taken:
        raise InputError(f"demo folder {folder}: already holds {', '.join(taken)}; the demo never "
                         "overwrites files: choose a new or empty folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"demo folder {folder}: cannot create it ({exc.strerror or exc})") from None
    paths = []
    try:
        with quiet_hf():
            _write_models(folder / "models")
            _write_data(folder / "data")
        (folder / "preprocess.py").write_text(_PREPROCESS)
        _write_trace_scripts(folder / "scripts")
        for name, spec in _SPECS.items():
            path = folder / f"{name}.json"
            path.write_text(json.dumps(PipelineSpec.from_dict(dict(spec)).to_dict(), indent=2)
                            + "\n")
            paths.append(path)
    except OSError as exc:
        raise InputError(f"demo folder {folder}: cannot write it ({exc.strerror or exc})") from None
    for path in paths:  # written by fp16studio: its preprocess runs without asking
        trust.trust(path, load_spec(path))
    return paths


def _write_models(folder: Path):
    import torch
    from transformers import (BertConfig, BertForSequenceClassification, ResNetConfig,
                              ResNetForImageClassification, T5Config, T5EncoderModel, ViTConfig,
                              ViTForImageClassification, Wav2Vec2Config, Wav2Vec2FeatureExtractor,
                              Wav2Vec2ForSequenceClassification)

    images = image_processor(32)
    labels = {"num_labels": 3, "id2label": {0: "cat", 1: "dog", 2: "bird"},
              "label2id": {"cat": 0, "dog": 1, "bird": 2}}
    torch.manual_seed(0)
    resnet = ResNetForImageClassification(ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], **labels))
    _save(resnet, images, folder / "tiny-resnet")
    _save(resnet.to(torch.bfloat16), images, folder / "resnet-bf16")  # config dtype: bfloat16
    torch.manual_seed(0)
    vit = ViTForImageClassification(ViTConfig(
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, **labels))
    _save(vit, images, folder / "tiny-vit")
    tokenizer = tiny_tokenizer()
    bert_config = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                       **labels)
    torch.manual_seed(0)
    _save(BertForSequenceClassification(BertConfig(**bert_config)), tokenizer,
          folder / "tiny-bert")
    torch.manual_seed(0)
    overflow = BertForSequenceClassification(BertConfig(**bert_config))
    with torch.no_grad():
        # Fine in float32 and bfloat16 (range 3e38), past float16's 65504 in the first FFN.
        overflow.bert.encoder.layer[0].intermediate.dense.weight.mul_(1e6)
    _save(overflow, tokenizer, folder / "overflow-bert")
    torch.manual_seed(0)
    t5 = T5EncoderModel(T5Config(vocab_size=len(tokenizer), d_model=32, d_kv=8, d_ff=64,
                                 num_layers=2, num_heads=2))
    with torch.no_grad():
        for block in t5.encoder.block:
            # Fine where T5 keeps `wo` in float32 (dtype= at load); past 65504 once .half()-ed.
            block.layer[1].DenseReluDense.wo.weight.mul_(3e4)
    _save(t5, tokenizer, folder / "overflow-t5")
    torch.manual_seed(0)
    wav2vec2 = Wav2Vec2ForSequenceClassification(Wav2Vec2Config(
        vocab_size=32, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, classifier_proj_size=16,
        num_labels=2, id2label={0: "no", 1: "yes"}, label2id={"no": 0, "yes": 1}))
    _save(wav2vec2, Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000,
                                             return_attention_mask=True),
          folder / "tiny-wav2vec2")


def _save(model, processor, folder: Path):
    model.save_pretrained(folder)
    processor.save_pretrained(folder)


def image_processor(side: int):
    from transformers import ViTImageProcessor

    return ViTImageProcessor(size={"height": side, "width": side})


def tiny_tokenizer():
    from transformers import BertTokenizer

    words = sorted(set(_WORDS.split()))
    pieces = [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + list(
        "abcdefghijklmnopqrstuvwxyz0123456789.,") + pieces
    return BertTokenizer(vocab={token: i for i, token in enumerate(vocab)})


def _write_data(folder: Path):
    import datasets
    import numpy as np
    from PIL import Image

    from ..data.sources import SYNTHETIC_TEXTS

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
              for _ in range(16)]
    ds = datasets.Dataset.from_dict({"image": images, "label": [i % 3 for i in range(16)]})
    ds = ds.cast_column("image", datasets.Image())
    ds = ds.cast_column("label", datasets.ClassLabel(names=["cat", "dog", "bird"]))
    datasets.DatasetDict({"train": ds}).save_to_disk(str(folder / "images"))
    rows = [{"text": text, "label": i % 3} for i, text in enumerate(SYNTHETIC_TEXTS)]
    (folder / "texts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # The class ids as a spreadsheet writes them: 0.0, 1.0, 2.0.
    (folder / "labels.csv").write_text("text,label\n" + "".join(
        f"{r['text']},{float(r['label'])}\n" for r in rows))
    _write_clips(folder / "clips")


def _write_clips(folder: Path):
    """Sine-wave clips at 8 kHz (resampled to the extractor's 16 kHz), in class folders."""
    import numpy as np
    import soundfile

    for i in range(8):
        label = ("no", "yes")[i % 2]
        (folder / label).mkdir(parents=True, exist_ok=True)
        n = 8000 + 800 * i
        wave = 0.5 * np.sin(2 * np.pi * 220 * (i + 1) * np.arange(n) / 8000).astype(np.float32)
        soundfile.write(folder / label / f"clip{i}.{('wav', 'flac')[i % 2]}", wave, 8000)


# -- trace demos: the seed article's three examples as scripts (`fp16studio trace demo:NAME`) ---
TRACE_DEMOS = {
    "map-cast": "The article's first example: a float16 cast inside Dataset.map is lost; the "
                "float16 ResNet gets float32 pixels",
    "blind-half": "The article's second example: model.half(), then every input tensor cast "
                  "with .half(), token ids included (BERT)",
    "pil-preprocess": "The article's third example: PIL preprocessing that casts to half inside "
                      "map, in a file of its own",
}
_SCRIPT_HEAD = '''\
from pathlib import Path

import torch
from datasets import load_from_disk
from transformers import AutoImageProcessor, AutoModelForImageClassification

DEMO = Path(__file__).resolve().parent.parent   # the demo's models/ and data/
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
'''
_TRACE_SCRIPTS = {
    "map-cast": '''\
"""The seed article's first example, runnable anywhere: the model was converted to float16, and
the map function casts the images to float16 too. datasets stores what map returns in Arrow and
gives float32 back, so the float16 model gets float32 pixels."""
''' + _SCRIPT_HEAD + '''
model = AutoModelForImageClassification.from_pretrained(DEMO / "models/tiny-resnet",
                                                        dtype=torch.float16).to(device).eval()
processor = AutoImageProcessor.from_pretrained(DEMO / "models/tiny-resnet")
dataset = load_from_disk(DEMO / "data/images")["train"]


def prepare_batch(example):
    pixels = processor(images=example["image"].convert("RGB"), return_tensors="pt")
    # Explicitly cast the image tensor to half precision
    example["pixel_values"] = pixels["pixel_values"][0].to(torch.float16)
    return example


prepared_dataset = dataset.map(prepare_batch, remove_columns=["image"]).with_format("torch")
dataloader = torch.utils.data.DataLoader(prepared_dataset, batch_size=4)
for batch in dataloader:
    input_tensor = batch["pixel_values"].to(device)
    with torch.inference_mode():
        output = model(input_tensor)
    print("predicted", output.logits.argmax(-1).tolist())
''',
    "blind-half": '''\
"""The seed article's second example, runnable anywhere and run on half-precision data: the
model is moved to the device and converted with model.half(), then every tensor of the
tokenizer's output is cast with .half(), token ids and attention mask included."""
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

DEMO = Path(__file__).resolve().parent.parent   # the demo's models/
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

model = AutoModelForSequenceClassification.from_pretrained(DEMO / "models/tiny-bert")
tokenizer = AutoTokenizer.from_pretrained(DEMO / "models/tiny-bert")
model.to(device)               # the article: model.cuda()
model = model.half()           # convert the model's weights to half precision
for param in model.parameters():
    if param.dtype != torch.float16:
        print(f"Error: Parameter not float16: {param.dtype}")

texts = ["the model expected float16", "a cast inside map is stored in arrow"]
inputs = tokenizer(texts, padding=True, return_tensors="pt").to(device)
inputs = {name: tensor.half() for name, tensor in inputs.items()}   # half-precision data
with torch.inference_mode():
    logits = model(**inputs).logits
print("predicted", logits.argmax(-1).tolist())
''',
    "pil-preprocess": '''\
"""The seed article's third example, runnable anywhere: custom PIL preprocessing (preprocess.py,
beside this script) casts each image tensor to half inside Dataset.map; Arrow gives float32
back, and the float16 model gets float32 pixels."""
from preprocess import custom_preprocessing
''' + _SCRIPT_HEAD + '''
model = AutoModelForImageClassification.from_pretrained(DEMO / "models/tiny-resnet",
                                                        dtype=torch.float16).to(device).eval()
dataset = load_from_disk(DEMO / "data/images")["train"]
processed_dataset = dataset.map(custom_preprocessing, remove_columns=["image"])
processed_dataset = processed_dataset.with_format("torch")

dataloader = torch.utils.data.DataLoader(processed_dataset, batch_size=4)
for batch in dataloader:
    input_tensor = batch["pixel_values"].to(device)
    with torch.inference_mode():
        output = model(input_tensor)
    print("predicted", output.logits.argmax(-1).tolist())
''',
}


def trace_script_name(name: str) -> str:
    return name.replace("-", "_") + ".py"


def trace_demo_script(name: str) -> Path:
    """The built-in trace demo script `name`, its files built once into the user's cache."""
    if name not in TRACE_DEMOS:
        raise InputError(f"no trace demo {name!r} (trace demos: {', '.join(TRACE_DEMOS)})")
    return ensure_demo_files() / "scripts" / trace_script_name(name)


def _write_trace_scripts(folder: Path):
    folder.mkdir(exist_ok=True)
    (folder / "preprocess.py").write_text(_PREPROCESS)
    for name, text in _TRACE_SCRIPTS.items():
        (folder / trace_script_name(name)).write_text(text)
