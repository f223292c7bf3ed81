"""``python -m perfdoctor``."""

import sys

from perfdoctor.cli import main

sys.exit(main())
