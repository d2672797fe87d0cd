"""Model zoo: Hugging Face-layout folders (``config.json`` + ``model.safetensors`` in float32 or bfloat16) loaded
into models built from :mod:`luminal.nn` layers.

* :class:`BertModel` / :class:`BertConfig`: BERT-family encoders (``model_type: "bert"``).
* :class:`GPT2LMHeadModel` / :class:`LlamaForCausalLM` (:class:`DecoderLM`): decoder-only language models
  (``model_type: "gpt2"`` / ``"llama"``) generating with a KV cache carried between executes of one compiled
  program (symbolic past length).
* :class:`ResNet` (``resnet18`` ... ``resnet152``, ``resnext50_32x4d``, ``wide_resnet50_2``): CNNs in
  torchvision's layout, loading torchvision checkpoints (``ResNet.from_pretrained``).
* :class:`SentenceEmbedder`: sentence embeddings (mean pooling + L2 normalization, as sentence-transformers
  runs all-MiniLM-L6-v2), tokenized with the ``tokenizers`` package (``pip install 'luminal[models]'``).

See ``docs/models.md``.
"""

from ._hf import MissingWeightError, ModelConfigError, load_weights, read_config
from .bert import BertConfig, BertModel, convert_hf_state, l2_normalize, mean_pool
from .decoder import (DecoderConfig, DecoderLM, DecoderProgram, GPT2LMHeadModel, KVCache, LlamaForCausalLM,
                      sample_next, sampling_distribution)
from .resnet import (BasicBlock, Bottleneck, ResNet, resnet18, resnet34, resnet50, resnet101, resnet152,
                     resnext50_32x4d, wide_resnet50_2)
from .sentence import SentenceEmbedder, load_tokenizer

__all__ = ["BertConfig", "BertModel", "SentenceEmbedder", "ModelConfigError", "MissingWeightError",
           "convert_hf_state", "load_weights", "read_config", "load_tokenizer", "mean_pool", "l2_normalize",
           "DecoderConfig", "DecoderLM", "DecoderProgram", "GPT2LMHeadModel", "KVCache", "LlamaForCausalLM",
           "sample_next", "sampling_distribution", "BasicBlock", "Bottleneck", "ResNet", "resnet18", "resnet34",
           "resnet50", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2"]
