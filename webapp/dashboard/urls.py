from django.urls import path

from webapp.dashboard import ops_views

urlpatterns = [
    path("nodes/<str:name>/", ops_views.node_page, name="ops-node"),
    path("nodes/<str:name>/data.json", ops_views.node_data, name="ops-node-data"),
    path("<slug:name>/", ops_views.page, name="ops-page"),
    path("<slug:name>/data.json", ops_views.data, name="ops-data"),
]
