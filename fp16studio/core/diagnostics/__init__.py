"""Diagnosis: evidence into findings, fixes as spec edits, float32 islands, the tensor tree."""
