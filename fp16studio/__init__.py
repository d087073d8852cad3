"""fp16studio: find and fix half-precision problems in Hugging Face pipelines."""

__version__ = "0.1.0"
