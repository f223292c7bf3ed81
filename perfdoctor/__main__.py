"""``python -m perfdoctor``."""

import sys

try:
    from perfdoctor.cli import main
except KeyboardInterrupt:  # Ctrl-C while the command-line modules load: an interruption like any other
    print("perfdoctor: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
