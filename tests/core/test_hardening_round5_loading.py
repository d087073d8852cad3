"""Hardening, round 5, class 6 (issue 44): a model that transformers itself cannot load is bad
input (one line, exit 2), never an internal error of ours: whatever fails inside from_pretrained
is transformers' or the model's own code's."""

import json
import shutil

from fp16studio.cli import main

OWN_CODE = """\
from torch import nn
from transformers import BertForSequenceClassification

NAME = "<script>alert('m')</script>"


class OwnModel(BertForSequenceClassification):
    def __init__(self, config):
        super().__init__(config)
        self.add_module(NAME, nn.Linear(config.num_labels, config.num_labels))

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None):
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids, labels=labels)
        out.logits = getattr(self, NAME)(out.logits)
        return out
"""


def test_a_model_of_its_own_code_transformers_cannot_load_is_bad_input(demo_dir, tmp_path,
                                                                        monkeypatch, capsys):
    import sys

    monkeypatch.setenv("FP16STUDIO_CONFIG_DIR", str(tmp_path / "config"))
    model = tmp_path / "model"
    shutil.copytree(demo_dir / "models/tiny-bert", model)
    (model / "modeling_own.py").write_text(OWN_CODE)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_own.OwnModel"}
    (model / "config.json").write_text(json.dumps(config))
    # Its weights saved with the module of that name (transformers 5 reads the names as patterns).
    monkeypatch.syspath_prepend(str(model))
    from transformers import AutoConfig

    import modeling_own
    modeling_own.OwnModel(AutoConfig.from_pretrained(model)).save_pretrained(model)
    sys.modules.pop("modeling_own")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "model", "dataset": "synthetic", "samples": 4,
                                "task": "sequence-classification", "trust_remote_code": True}))
    capsys.readouterr()
    assert main(["diagnose", str(spec), "--trust"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fp16studio: model 'model' could not be loaded: AttributeError")
    assert "\n" not in err
