"""``python -m luminal``: the command line (:mod:`luminal.cli`)."""

import sys

from .cli import main

sys.exit(main())
