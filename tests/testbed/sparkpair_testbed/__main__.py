"""`python -m sparkpair_testbed ...`: the testbed's command line (cli.py)."""
import sys

from .cli import main

sys.exit(main())
