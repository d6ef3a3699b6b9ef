from django.contrib.auth import views as auth
from django.urls import path

from webapp.console import views

urlpatterns = [
    path(
        "login/",
        auth.LoginView.as_view(template_name="console/login.html", next_page="console-leases"),
        name="console-login",
    ),
    path("logout/", auth.LogoutView.as_view(next_page="console-login"), name="console-logout"),
    path("", views.leases, name="console-leases"),
    path("leases/live.json", views.leases_live, name="console-leases-live"),
    path("leases/new/", views.lease_request, name="console-request"),
    path("leases/<int:pk>/", views.lease_detail, name="console-lease"),
    path("leases/<int:pk>/end/", views.lease_end, name="console-lease-end"),
    path("leases/<int:pk>/cancel/", views.lease_cancel, name="console-lease-cancel"),
    path("leases/<int:pk>/migrate/", views.lease_migrate, name="console-lease-migrate"),
    path("leases/<int:pk>/receipt.json", views.lease_receipt_download, name="console-receipt"),
    path("leases/<int:pk>/readings.csv", views.lease_readings, name="console-readings"),
    path(
        "leases/<int:pk>/readings/<int:seq>.csv",
        views.line_readings,
        name="console-line-readings",
    ),
    path("bills/", views.bills, name="console-bills"),
    path("bills/<str:month>.json", views.bill_download, name="console-bill"),
    path("gpus/", views.gpus, name="console-gpus"),
]
