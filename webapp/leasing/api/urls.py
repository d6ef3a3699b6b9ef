from django.urls import path
from rest_framework.routers import DefaultRouter

from webapp.leasing.api.views import BillViewSet, LeaseViewSet, PricePreviewView

# No `.json` suffix routes: the format is chosen by the Accept header, one URL per resource.
router = DefaultRouter()
router.include_format_suffixes = False
router.register("leases", LeaseViewSet, basename="lease")
router.register("bills", BillViewSet, basename="bill")

urlpatterns = [
    path("price-preview/", PricePreviewView.as_view(), name="price-preview"),
    *router.urls,
]
