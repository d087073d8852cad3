"""peft's prepare_model_for_kbit_training on a model that is not quantized: it casts the
bfloat16 model to float32 (twice the memory, and float32 compute)."""
import tempfile

import torch
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
folder = tempfile.mkdtemp()
LlamaForCausalLM(config).save_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
model = prepare_model_for_kbit_training(model)  # MARK: prepare
model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for step in range(2):
    ids = torch.randint(0, 64, (2, 16))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print("base", model.get_base_model().model.embed_tokens.weight.dtype)
