from django.urls import path
from django.views.generic import RedirectView

from webapp.dashboard import ops_views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="ops-page", permanent=False), {"name": "fleet"}),
    path("sites/<str:site>/", ops_views.site_page, name="ops-site"),
    path("sites/<str:site>/data.json", ops_views.site_data, name="ops-site-data"),
    path("sites/<str:site>/pools/<str:generation>/", ops_views.pool_page, name="ops-pool"),
    path(
        "sites/<str:site>/pools/<str:generation>/data.json",
        ops_views.pool_data,
        name="ops-pool-data",
    ),
    path("nodes/<str:name>/", ops_views.node_page, name="ops-node"),
    path("nodes/<str:name>/data.json", ops_views.node_data, name="ops-node-data"),
    path("gpus/<str:uuid>/", ops_views.gpu_page, name="ops-gpu"),
    path("gpus/<str:uuid>/data.json", ops_views.gpu_data, name="ops-gpu-data"),
    path("<slug:name>/", ops_views.page, name="ops-page"),
    path("<slug:name>/data.json", ops_views.data, name="ops-data"),
]
