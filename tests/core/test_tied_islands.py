"""A float32 island on a module whose weight is tied (Llama/Qwen `tie_word_embeddings`: lm_head
shares embed_tokens' weight) gets its own float32 copy; its partner stays in half precision."""

import subprocess
import sys

import pytest
import torch

from fp16studio.core import PipelineSpec, diagnose, export_script


@pytest.fixture(scope="module")
def tied_llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    from fp16studio.core.demo.pipelines import tiny_tokenizer

    folder = tmp_path_factory.mktemp("tied-llama")
    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=64, tie_word_embeddings=True, dtype="float32")
    model = LlamaForCausalLM(config)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def spec_for(folder):
    return PipelineSpec(model=str(folder), dataset="synthetic", model_dtype="bfloat16",
                        run_in_float32=["lm_head"], device="cpu", samples=4)


def test_the_island_gets_its_own_copy_and_the_partner_stays_half(tied_llama):
    from fp16studio.core.run.pipeline import prepare

    model = prepare(spec_for(tied_llama)).model
    assert model.lm_head.weight.dtype == torch.float32
    assert model.model.embed_tokens.weight.dtype == torch.bfloat16
    report = diagnose(spec_for(tied_llama))
    assert report.ok and not report.findings, [f.code for f in report.findings]


def test_the_exported_script_unties_the_island_too(tied_llama, tmp_path):
    script = tmp_path / "tied.py"
    export_script(spec_for(tied_llama), script)
    probe = tmp_path / "probe.py"
    probe.write_text(script.read_text().replace(
        'if __name__ == "__main__":',
        "def _probe():\n"
        "    model = load_model(torch.device('cpu'))\n"
        "    print(model.lm_head.weight.dtype, model.model.embed_tokens.weight.dtype)\n\n\n"
        'if __name__ == "__main__":\n    _probe()\n    raise SystemExit(0)\n'))
    proc = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["torch.float32", "torch.bfloat16"]
