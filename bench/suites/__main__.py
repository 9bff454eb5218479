"""`python -m bench.suites ...` is `python -m bench.suites.meetings ...`."""

import sys

from .meetings import main

sys.exit(main())
