"""A healthy LoRA fine-tune on a bfloat16 base: PEFT keeps the adapters in float32 on purpose,
gradient checkpointing recomputes the layers in backward. Nothing to find."""
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
for step in range(3):
    ids = torch.randint(0, 64, (2, 16))
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
adapters = {str(p.dtype) for n, p in model.named_parameters() if "lora_" in n}
print("loss", round(loss.item(), 2), "adapters", *adapters)
