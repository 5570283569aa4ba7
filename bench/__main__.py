"""``python -m bench`` (``make bench``, ``make bench-scale``): see :mod:`bench.main` and bench/README.md."""

import sys

from bench.main import main

sys.exit(main())
