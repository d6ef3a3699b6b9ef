#!/usr/bin/env python3
"""Django's command-line utility for Wattlease (the same as `wattlease manage ...`)."""

import sys

from webapp.cli import django_main

if __name__ == "__main__":
    sys.exit(django_main(sys.argv))
