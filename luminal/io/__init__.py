"""Weights I/O: safetensors load/save for state dicts and modules; atomic, durable saves for every writer."""

from .atomic import atomic_save
from .safetensors import (UnsupportedDTypeError, bfloat16_bits_to_float32, float32_to_bfloat16_bits, load_into,
                          load_safetensors, safetensors_header, save_safetensors)

__all__ = ["load_safetensors", "save_safetensors", "load_into", "atomic_save", "safetensors_header",
           "float32_to_bfloat16_bits", "bfloat16_bits_to_float32", "UnsupportedDTypeError"]
