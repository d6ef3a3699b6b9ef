from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView

from webapp.core.api.docs import SwaggerView
from webapp.core.redirects import to_api_v1
from webapp.dashboard import views as dashboard
from webapp.observability import views as observability

admin.site.site_header = "Wattlease operator console"
admin.site.site_title = "Wattlease"

api_v1 = [
    path("", include("webapp.leasing.api.urls")),
    path("agent/", include("webapp.attestation.api.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SwaggerView.as_view(url_name="schema"), name="api-docs"),
]

urlpatterns = [
    path("", dashboard.overview, name="dashboard"),
    path("dashboard/data.json", dashboard.data, name="dashboard-data"),
    path("favicon.ico", dashboard.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("console/", include("webapp.console.urls")),
    path("i18n/", include("django.conf.urls.i18n")),  # set_language: the language switch
    path("ops/", include("webapp.dashboard.urls")),
    path("api/v1/", include(api_v1)),
    # the node agents in the field post here; a POST redirect is not followed by them
    path("api/agent/", include(("webapp.attestation.api.urls", "agent-unversioned"))),
    re_path(r"^api/(?P<rest>(?!v1/).*)$", to_api_v1, name="api-unversioned"),
    path("metrics", observability.metrics, name="metrics"),
]

handler404 = "webapp.core.api.errors.page_not_found"
