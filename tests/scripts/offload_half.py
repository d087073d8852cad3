"""A tiny Llama saved to the folder in argv[1], loaded back in float16 with a device_map that
offloads its blocks to the CPU and one to disk (accelerate's dispatch), and run once."""

import sys

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

folder = sys.argv[1]
config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                     num_attention_heads=2, num_key_value_heads=2)
LlamaForCausalLM(config).save_pretrained(folder)
placement = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
             "model.layers.1": "disk", "model.norm": "cpu", "lm_head": "cpu"}
offload = {"device_map": placement, "offload_folder": f"{folder}/offload"}
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float16, **offload)
with torch.no_grad():
    logits = model(torch.tensor([[1, 2, 3]])).logits
