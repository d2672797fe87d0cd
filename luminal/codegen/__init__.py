"""Code generation: kernel IR and lowering (``kernel``), the C renderer (``c``)."""

from .c import CProgram, CRenderer
from .kernel import Program, lower

__all__ = ["Program", "lower", "CProgram", "CRenderer"]
