"""``python -m bench`` (``make bench``): see :mod:`bench.suite` and bench/README.md."""

import sys

from bench.suite import main

sys.exit(main())
