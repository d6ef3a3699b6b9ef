from rest_framework.routers import DefaultRouter

from webapp.leasing.api.views import BillViewSet, LeaseViewSet

router = DefaultRouter()
router.register("leases", LeaseViewSet, basename="lease")
router.register("bills", BillViewSet, basename="bill")

urlpatterns = router.urls
