import sys

from bridge.console import main

sys.exit(main())
