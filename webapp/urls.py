from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from webapp.dashboard import views as dashboard
from webapp.observability import views as observability

admin.site.site_header = "Wattlease operator console"
admin.site.site_title = "Wattlease"

urlpatterns = [
    path("", dashboard.overview, name="dashboard"),
    path("dashboard/data.json", dashboard.data, name="dashboard-data"),
    path("admin/", admin.site.urls),
    path("api/", include("webapp.leasing.api.urls")),
    path("api/agent/", include("webapp.attestation.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("metrics", observability.metrics, name="metrics"),
]
