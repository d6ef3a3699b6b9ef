"""Serve the plotly.js that ships inside the plotly wheel as /static/plotly/plotly.min.js,
so the dashboard needs no CDN and its chart library always matches the Python package."""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_DATA = Path(plotly.__file__).parent / "package_data"
PUBLIC_NAME = "plotly/plotly.min.js"


class PlotlyJsFinder(BaseFinder):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=PLOTLY_DATA)
        self.storage.prefix = "plotly"

    def check(self, **kwargs):
        return []

    def find(self, path, find_all=False, **kwargs):
        if path != PUBLIC_NAME:
            return [] if find_all else None
        match = str(PLOTLY_DATA / "plotly.min.js")
        return [match] if find_all else match

    def list(self, ignore_patterns):
        yield "plotly.min.js", self.storage
