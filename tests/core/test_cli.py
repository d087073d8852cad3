"""The command line: exit codes, JSON shapes, and one clear line for bad input."""

import json
import subprocess
import sys

import pytest

from fp16studio import cli
from json_schemas import parsed


def main(argv):
    return cli.main([str(a) for a in argv])


def run_cli(*args):
    """Run the real console entry point in a subprocess (what users and CI see)."""
    return subprocess.run([sys.executable, "-m", "fp16studio", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def test_diagnose_json_shape_and_exit_code_on_error(demo_dir, capsys):
    assert main(["diagnose", "demo:fp16-model", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"ok", "spec", "device", "findings", "error", "inventory", "output"}
    assert doc["ok"] is False and doc["device"] == "cpu" and doc["output"] is None
    assert set(doc["error"]) >= {"type", "message"}
    assert set(doc["inventory"]) >= {"parameters", "tensors", "bytes", "dtypes"}
    assert doc["inventory"]["parameters"] > 0 and doc["inventory"]["dtypes"]["float16"] > 0
    for finding in doc["findings"]:
        assert set(finding) >= {"code", "severity", "location", "message", "evidence", "fixes"}
        assert all(set(fix) >= {"id", "title"} for fix in finding["fixes"])
    assert doc["spec"]["model_dtype"] == "float16"


def test_diagnose_healthy_exits_0_with_readable_text(demo_dir, capsys):
    assert main(["diagnose", "demo:healthy"]) == 0
    out = capsys.readouterr().out
    assert "ok" in out.splitlines()[0] and "output logits: float32 [4, 3]" in out


def test_fix_writes_a_spec_that_diagnoses_clean(demo_dir, tmp_path, capsys):
    fixed = tmp_path / "fixed.json"
    assert main(["fix", "demo:map-cast", "-o", fixed, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True
    assert doc["applied"] == [{"round": 1, "code": "dtype-mismatch", "fix": "cast-inputs-float16"}]
    assert doc["fixed_spec"]["input_dtype"] == "float16" and doc["fixed_spec"]["map_dtype"] is None
    written = json.loads(fixed.read_text())
    assert written["applied_fixes"][0]["id"] == "cast-inputs-float16"
    # Saved elsewhere than the demo: its local paths were made absolute so it still loads.
    assert main(["diagnose", fixed]) == 0


def test_fix_that_cannot_succeed_exits_1(demo_dir, tmp_path):
    # Two problems and one round: the list batch gets fixed, the overflow remains.
    spec = tmp_path / "broken.json"
    spec.write_text(json.dumps({"model": str(demo_dir / "models/overflow-bert"),
                                "dataset": str(demo_dir / "data/texts.jsonl"),
                                "model_dtype": "float16", "format": "python"}))
    assert main(["fix", spec, "-o", tmp_path / "out.json", "--rounds", "1"]) == 1


def test_inspect_json(demo_dir, capsys):
    assert main(["inspect", demo_dir / "models/tiny-bert", "--dtype", "fp16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"model", "architecture", "parameters", "tensors", "checkpoint_dtypes",
                        "memory_bytes", "largest_layer", "keep_fp32_modules"}
    assert doc["architecture"] == "BertForSequenceClassification"
    assert doc["memory_bytes"]["float16"] * 2 == doc["memory_bytes"]["float32"]
    assert doc["checkpoint_dtypes"]["float32"] > 0
    assert doc["largest_layer"]["name"] == "bert.embeddings.word_embeddings"


def test_inspect_a_70b_config_on_the_meta_device(tmp_path, capsys):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
              "intermediate_size": 28672, "num_attention_heads": 64, "num_hidden_layers": 80,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["inspect", tmp_path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert 70e9 < doc["parameters"] < 71e9
    assert doc["memory_bytes"]["bfloat16"] == 2 * doc["parameters"]
    assert doc["checkpoint_dtypes"] is None


def test_demo_writes_runnable_specs(tmp_path, capsys):
    assert main(["demo", tmp_path / "demo"]) == 0
    specs = sorted(p.stem for p in (tmp_path / "demo").glob("*.json"))
    from fp16studio.core.demo.pipelines import DEMOS

    assert specs == sorted(DEMOS)
    assert main(["diagnose", tmp_path / "demo" / "healthy.json"]) == 0


BAD_INPUTS = {
    "unreadable spec": lambda d, t: t / "missing.json",
    "not json": lambda d, t: _write(t, "bad.json", "{model: nope"),
    "unknown key": lambda d, t: _spec(d, t, colour="blue"),
    "bad dtype": lambda d, t: _spec(d, t, model_dtype="float17"),
    "zero batch": lambda d, t: _spec(d, t, batch_size=0),
    "missing model": lambda d, t: _spec(d, t, model=str(t / "nowhere")),
    "corrupt model": lambda d, t: _spec(d, t, model=str(_corrupt_model(t))),
    "missing dataset": lambda d, t: _spec(d, t, dataset=str(t / "nodata")),
    "missing column": lambda d, t: _spec(d, t, columns={"image": "picture"}),
    "missing preprocess": lambda d, t: _spec(d, t, preprocess=str(t / "pre.py") + ":fn"),
    "uncached hub model": lambda d, t: _spec(d, t, model="someone/not-cached-anywhere"),
    "uncached hub dataset": lambda d, t: _spec(d, t, dataset="someone/no-such-dataset"),
    "unknown demo": lambda d, t: "demo:nothing-here",
}


def _write(folder, name, text):
    path = folder / name
    path.write_text(text)
    return path


def _spec(demo_dir, folder, **keys):
    data = {"model": str(demo_dir / "models/tiny-resnet"), "dataset": str(demo_dir / "data/images")}
    data.update(keys)
    return _write(folder, "spec.json", json.dumps(data))


def _corrupt_model(folder):
    model = folder / "corrupt"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    return model


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(case, demo_dir, tmp_path, capsys):
    spec = BAD_INPUTS[case](demo_dir, tmp_path)
    assert main(["diagnose", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fp16studio: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_console_command_end_to_end(demo_dir):
    done = run_cli("diagnose", "demo:blind-half", "--json")
    assert done.returncode == 1, done.stderr
    doc = parsed("diagnose", done.stdout)
    assert doc["findings"][0]["code"] == "integer-cast"
    bad = run_cli("diagnose", "demo:nothing-here")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and bad.stdout == ""


def test_version():
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.startswith("fp16studio ")


@pytest.mark.parametrize("option", [["--warmup", "-1"], ["--min-iterations", "0"],
                                    ["--min-seconds", "-1"], ["--min-rounds", "0"]])
def test_bench_limits_out_of_range_are_bad_input(option, capsys):
    assert main(["bench", "demo:healthy", *option]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bench:" in err


def test_a_wrong_command_line_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fix", "demo:healthy"])          # -o is required
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "-o/--output" in err


def test_script_arguments_without_the_double_dash_say_where_they_go(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["trace", "train.py", "--epochs", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert "--epochs 1" in err and "fp16studio trace SCRIPT -- ARGS" in err


def test_a_reader_that_goes_away_is_not_an_internal_error(monkeypatch, demo_dir):
    import os
    import sys

    read, write = os.pipe()
    os.close(read)                           # `| head` that has already exited
    monkeypatch.setattr(sys, "stdout", os.fdopen(write, "w", buffering=1))
    assert main(["diagnose", "demo:healthy"]) == 141


def test_variants_take_the_dtype_aliases():
    from fp16studio.core import InputError
    from fp16studio.core.precision.bench import parse_variants

    assert parse_variants("fp16,bf16,autocast-half") == ["float16", "bfloat16",
                                                          "autocast-float16"]
    with pytest.raises(InputError, match="unknown variant 'int8'"):
        parse_variants("int8")


def test_inspect_given_a_spec_says_it_takes_a_model(tmp_path, capsys):
    spec = tmp_path / "pipeline.json"
    spec.write_text('{"model": "m", "dataset": "synthetic"}')
    for given in ("demo:healthy", str(spec)):
        assert main(["inspect", given]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a spec" in err and "hf download" not in err


def test_every_argument_of_every_command_says_what_it_is_in_help():
    import argparse

    from fp16studio.cli.parser import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    unsaid = [f"{name}: {'/'.join(action.option_strings) or action.metavar or action.dest}"
              for name, command in [("fp16studio", parser), *commands.choices.items()]
              for action in command._actions
              if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
              and not (action.help or "").strip()]
    assert not unsaid, unsaid
