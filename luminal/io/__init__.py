"""Weights I/O: safetensors load/save for state dicts and modules; atomic, durable saves for every writer."""

from .atomic import atomic_save
from .safetensors import load_into, load_safetensors, save_safetensors

__all__ = ["load_safetensors", "save_safetensors", "load_into", "atomic_save"]
