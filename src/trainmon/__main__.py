"""``python -m trainmon``."""

import sys

from trainmon.cli import main

sys.exit(main())
