"""`python -m attest verify ...` and `python -m attest agent ...`."""

from __future__ import annotations

import sys

from attest.cli import main

sys.exit(main())
