"""`python -m attest verify ...`, `python -m attest agent ...`, `python -m attest registrar ...`."""

from __future__ import annotations

import sys

from attest.cli import main

sys.exit(main())
