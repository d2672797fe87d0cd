"""Learning-rate schedulers with the semantics (and arithmetic) of ``torch.optim.lr_scheduler``.

A scheduler works on any optimizer-like object with ``param_groups``: a list of dicts, each with an ``"lr"``
entry (luminal's optimizers, torch's, or a stand-in). It rewrites ``group["lr"]`` in place; luminal's
optimizers read it at the next ``execute()``, so changing the learning rate never recompiles::

    opt = SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = CosineAnnealingLR(opt, T_max=100)    # the constructor already applies epoch 0's lr
    for epoch in range(100):
        train_one_epoch()
        sched.step()                             # after the optimizer steps, as in PyTorch

As in PyTorch, the constructor calls :meth:`LRScheduler.step` once (``last_epoch`` goes from ``-1`` to ``0``)
and stores each group's starting lr as ``group["initial_lr"]`` (which ``base_lrs`` is read from). Most
schedulers are *chainable* like PyTorch's: each step multiplies the group's current lr, so lr changes made
by someone else carry on. :class:`CosineAnnealingLR`, :class:`LambdaLR` and :class:`OneCycleLR` use closed
forms of the epoch instead. ``state_dict()`` holds only numbers, strings, lists and dicts (no functions), so
it fits in a JSON / ``.npz`` checkpoint.
"""

from .base import LRScheduler
from .cyclic import CosineAnnealingWarmRestarts, CyclicLR
from .decay import (ConstantLR, CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR, MultiplicativeLR, MultiStepLR,
                    PolynomialLR, StepLR)
from .policies import ChainedScheduler, OneCycleLR, ReduceLROnPlateau, SequentialLR

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
           "PolynomialLR", "CosineAnnealingLR", "SequentialLR", "OneCycleLR", "ReduceLROnPlateau",
           "CosineAnnealingWarmRestarts", "CyclicLR", "MultiplicativeLR", "ChainedScheduler"]
