"""The built-in demo: tiny models, datasets, specs and scripts made offline with fixed seeds."""
