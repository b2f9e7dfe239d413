"""``python -m fastfake``: see :mod:`fastfake.cli`."""
import sys

from .cli import main

sys.exit(main())
