"""`python3 -m bench`: the suite (run_all.py)."""

import sys

from bench.run_all import main

sys.exit(main())
