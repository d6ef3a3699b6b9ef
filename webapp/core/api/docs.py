"""The API's documentation pages, answering only GET and HEAD: their HTML renderer has no
page for OPTIONS, which used to end in a 500."""

from __future__ import annotations

from drf_spectacular.views import SpectacularSwaggerView


class SwaggerView(SpectacularSwaggerView):
    http_method_names = ["get", "head"]
