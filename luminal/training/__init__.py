"""Training: autograd as a graph pass, optimizers as graph builders, schedulers, losses and a fit loop."""

from .autograd import backward, grad, unview
from .optim import SGD, Adagrad, Adam, AdamW, Optimizer, RMSprop, clip_grad_norm, clip_grad_value

__all__ = ["grad", "backward", "unview", "Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad",
           "clip_grad_norm", "clip_grad_value"]
