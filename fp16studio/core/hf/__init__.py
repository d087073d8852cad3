"""The Hugging Face side: the Hub and its cache, loading a model and processor, checkpoints."""
