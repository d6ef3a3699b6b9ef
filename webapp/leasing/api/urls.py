from django.urls import path
from rest_framework.routers import DefaultRouter

from webapp.leasing.api.views import BillViewSet, LeaseViewSet, PricePreviewView

router = DefaultRouter()
router.register("leases", LeaseViewSet, basename="lease")
router.register("bills", BillViewSet, basename="bill")

urlpatterns = [
    path("price-preview/", PricePreviewView.as_view(), name="price-preview"),
    *router.urls,
]
