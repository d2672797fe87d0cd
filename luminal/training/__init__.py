"""Training: autograd as a graph pass, optimizers as graph builders, schedulers, losses and a fit loop."""

from .autograd import backward, grad, unview

__all__ = ["grad", "backward", "unview"]
