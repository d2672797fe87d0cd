"""Training: autograd as a graph pass, optimizers as graph builders, schedulers, a fit loop, checkpoints.

The losses live in :mod:`luminal.nn` (``luminal.nn.functional.cross_entropy``, ``luminal.nn.CrossEntropyLoss``...),
learning-rate schedulers in :mod:`luminal.training.lr_scheduler`, data loading in :mod:`luminal.data`.
"""

from .autograd import backward, grad, unview
from .optim import SGD, Adagrad, Adam, AdamW, Optimizer, RMSprop, clip_grad_norm, clip_grad_value
from .optim_extra import Adadelta, Adamax, NAdam, RAdam, Rprop
from .trainer import Trainer, load_checkpoint, save_checkpoint

__all__ = ["grad", "backward", "unview", "Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad",
           "Adamax", "NAdam", "RAdam", "Adadelta", "Rprop", "clip_grad_norm", "clip_grad_value", "Trainer", "save_checkpoint", "load_checkpoint"]
