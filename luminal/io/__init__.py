"""Weights I/O: safetensors load/save for state dicts and modules."""

from .safetensors import load_into, load_safetensors, save_safetensors

__all__ = ["load_safetensors", "save_safetensors", "load_into"]
