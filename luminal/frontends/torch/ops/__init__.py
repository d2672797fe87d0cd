"""ATen operator handlers, by family; importing this package registers them all (``_core._reg``)."""

from . import elementwise, nn, shape  # noqa: F401 - each module registers its handlers
