"""``python -m odradek ...``: the same command as the installed ``odradek`` script."""

from __future__ import annotations

import sys

from odradek.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
