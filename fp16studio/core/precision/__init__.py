"""Precision variants compared: benchmark timing and memory, drift from float32."""
