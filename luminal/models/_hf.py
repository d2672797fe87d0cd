"""Reading Hugging Face-layout model folders: ``config.json``, weights (``model.safetensors``, a sharded
``model.safetensors.index.json``, or ``pytorch_model.bin`` when torch is installed) and sentence-transformers'
module files (``modules.json``, ``1_Pooling/config.json``, ``sentence_bert_config.json``)."""

from __future__ import annotations

import json
import os

import numpy as np

from ..io import load_safetensors

__all__ = ["ModelConfigError", "MissingWeightError", "read_json", "read_config", "load_weights"]


class ModelConfigError(ValueError):
    """A model folder whose ``config.json`` (or another config file) the zoo cannot use; the message names the
    file, the key and what was expected."""


class MissingWeightError(ValueError):
    """A tensor the model needs is absent from (or mis-shaped in) the weight files; the message names it."""


def read_json(path: str) -> dict:
    """A JSON object from ``path``; ``ModelConfigError`` naming the file if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as err:
        raise ModelConfigError(f"{path}: not valid JSON ({err}); expected a JSON object") from err
    if not isinstance(data, dict):
        raise ModelConfigError(f"{path}: expected a JSON object at the top level, got {type(data).__name__}")
    return data


def read_config(folder) -> tuple[str, dict]:
    """``(path, dict)`` of ``folder/config.json``; clear errors for a missing folder or file."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{folder!r} is not a folder; expected a Hugging Face-layout model folder "
                                "(config.json + model.safetensors)")
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{folder!r} has no config.json; expected a Hugging Face-layout model folder "
                                f"(config.json + model.safetensors); found {sorted(os.listdir(folder))[:20]}")
    return path, read_json(path)


def load_weights(folder) -> tuple[str, dict[str, np.ndarray]]:
    """``(description of the files read, {name: float32/int numpy array})`` of a folder's weights.

    Looks for ``model.safetensors``, then ``model.safetensors.index.json`` (shards), then ``pytorch_model.bin``
    (needs torch; loaded with ``weights_only=True``). BF16 tensors are widened to float32 exactly, F16/F64 cast
    to float32."""
    folder = os.fspath(folder)
    single = os.path.join(folder, "model.safetensors")
    index = os.path.join(folder, "model.safetensors.index.json")
    binary = os.path.join(folder, "pytorch_model.bin")
    if os.path.isfile(single):
        return single, load_safetensors(single, dtype="float32")
    if os.path.isfile(index):
        mapping = read_json(index).get("weight_map")
        if not isinstance(mapping, dict):
            raise ModelConfigError(f"{index}: expected a 'weight_map' object (tensor name -> shard file)")
        state = {}
        for shard in sorted(set(mapping.values())):
            state.update(load_safetensors(os.path.join(folder, shard), dtype="float32"))
        return index, state
    if os.path.isfile(binary):
        try:
            import torch
        except ImportError:
            raise FileNotFoundError(f"{folder!r} has only pytorch_model.bin, which needs torch to read; install "
                                    "torch or convert the weights to model.safetensors") from None
        raw = torch.load(binary, map_location="cpu", weights_only=True)
        state = {}
        for k, v in raw.items():
            v = v.detach()
            state[k] = (v.float() if v.is_floating_point() else v).numpy()
        return binary, state
    raise FileNotFoundError(f"{folder!r} has no weights; expected model.safetensors, model.safetensors.index.json "
                            "or pytorch_model.bin")
