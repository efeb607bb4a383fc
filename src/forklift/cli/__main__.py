"""`python -m forklift.cli`: the same command as `forklift`."""

import sys

from forklift.cli import main

sys.exit(main())
