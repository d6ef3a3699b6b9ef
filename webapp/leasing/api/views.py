from __future__ import annotations

import django_filters
from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.api.serializers import prefetched
from webapp.core.openapi import ERROR
from webapp.leasing import actions, bills, scheduling, selectors, states
from webapp.leasing.api.serializers import (
    ClusterJobSerializer,
    LeaseCreateSerializer,
    LeaseRequestSerializer,
    LeaseSerializer,
    MigrateSerializer,
    PricePreviewSerializer,
)
from webapp.leasing.grants import ClusterError, lease_jobs
from webapp.leasing.models import Lease
from webapp.leasing.receipts import ReceiptUnavailable, lease_receipt
from webapp.tenancy.authentication import IsTenant


class PricePreviewView(APIView):
    """What a lease request would cost if it were placed now: the same request body as
    `POST /api/v1/leases/`, answered by the scheduler's planner and pricer; nothing is
    written, so a read-only key may ask."""

    permission_classes = [IsTenant]

    @extend_schema(request=LeaseRequestSerializer, responses=PricePreviewSerializer)
    def post(self, request):
        form = LeaseRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        return Response(scheduling.preview(**form.validated_data))


class LeaseFilter(django_filters.FilterSet):
    """Declared once: `filterset_fields` would make django-filter build this class anew on
    every request."""

    class Meta:
        model = Lease
        fields = ["state", "precision"]


class LeaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """A tenant's leases: list, read, request, end and cancel."""

    serializer_class = LeaseSerializer
    filterset_class = LeaseFilter

    def get_queryset(self):
        leases = selectors.tenant_leases(self.request.user)
        return leases.prefetch_related(prefetched("gpus"), prefetched("settlements"))

    def _actor(self) -> str:
        return str(self.request.user)

    @extend_schema(request=LeaseCreateSerializer, responses={201: LeaseSerializer})
    def create(self, request):
        form = LeaseCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        try:
            lease = actions.request_lease(
                request.user.tenant, actor=self._actor(), **form.validated_data
            )
        except actions.LeaseError as refused:
            raise ValidationError(str(refused), code=refused.code) from None
        return Response(LeaseSerializer(lease).data, status=status.HTTP_201_CREATED)

    def _act(self, pk, do):
        lease = self.get_object()
        try:
            lease = do(lease)
        except states.IllegalTransition as exc:
            raise ValidationError(str(exc), code="lease.state") from None
        except actions.LeaseError as exc:
            raise ValidationError(str(exc), code=exc.code) from None
        return Response(LeaseSerializer(Lease.objects.get(pk=lease.pk)).data)

    @extend_schema(request=None, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def end(self, request, pk=None):
        return self._act(pk, lambda lease: actions.end_lease(lease, actor=self._actor()))

    @extend_schema(request=None, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        return self._act(
            pk, lambda lease: actions.cancel_lease(lease, reason="by tenant", actor=self._actor())
        )

    @extend_schema(request=MigrateSerializer, responses=LeaseSerializer)
    @action(detail=True, methods=["post"])
    def migrate(self, request, pk=None):
        """Move the running lease to another GPU generation; the time so far is settled at
        the old terms."""
        form = MigrateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        generation = form.validated_data["generation"]
        return self._act(
            pk, lambda lease: scheduling.migrate(lease, generation, actor=self._actor())
        )

    @extend_schema(
        request=None,
        responses={
            200: dict,
            409: OpenApiResponse(ERROR, "the lease is not on the ledger yet"),
            501: OpenApiResponse(ERROR, "receipts come from the embedded ledger only"),
        },
    )
    @action(detail=True, methods=["get"])
    def receipt(self, request, pk=None):
        """Every ledger record of this lease with the block headers and endorsements they
        sit in (on Fabric: the raw blocks holding them): check it offline with
        `python -m ledger verify-receipt FILE --trust ROOTS`."""
        try:
            return Response(lease_receipt(self.get_object()))
        except ReceiptUnavailable as exc:  # answered in the API's one error format
            error = APIException(exc.detail, code="receipt.unavailable")
            error.status_code = exc.status
            raise error from None

    @extend_schema(
        request=None,
        responses={
            200: ClusterJobSerializer(many=True),
            503: OpenApiResponse(ERROR, "the cluster could not be asked"),
        },
    )
    # a plain list (a lease's steps, all of them): not paginated, and the schema says so
    @action(detail=True, methods=["get"], pagination_class=None)
    def jobs(self, request, pk=None):
        """The job steps that ran inside this lease's grant, from the cluster's accounting
        (job id, user, state, start, end, GPUs, GPU-seconds): this tenant's lease only."""
        try:
            found = lease_jobs(self.get_object())
        except ClusterError as exc:
            error = APIException(f"the cluster could not be asked: {exc}", code=exc.code)
            error.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
            raise error from None
        return Response(ClusterJobSerializer(found, many=True).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("seq", int, required=True, description="the bill line's number")
        ],
        responses={(200, "text/csv"): str},
    )
    @action(detail=True, methods=["get"])
    def readings(self, request, pk=None):
        """The energy-counter readings behind one bill line: re-hashed, they give the
        telemetry digest on the ledger (`python -m ledger audit-bill --readings`)."""
        lease = self.get_object()
        seq = request.query_params.get("seq", "")
        if not seq.isdigit():
            raise ValidationError({"seq": f"must be a bill line number, got {seq!r}"})
        line = lease.settlements.filter(seq=int(seq)).first()
        if line is None:
            raise NotFound(f"lease {lease.pk} has no bill line {seq}")
        return HttpResponse(bills.readings_csv(line), content_type="text/csv")


class BillViewSet(viewsets.ViewSet):
    """The tenant's bill: its lines, each a settlement the ledger's contract re-checked,
    with the evidence to find it there (`?month=YYYY-MM` for one month)."""

    @extend_schema(
        parameters=[OpenApiParameter("month", str, description="YYYY-MM (UTC)")],
        responses=dict,
    )
    def list(self, request):
        lines = selectors.tenant_lines(request.user)
        try:
            month = request.query_params.get("month")
            return Response(bills.bill(lines, month, request.user.tenant.slug))
        except bills.BillError as exc:
            raise ValidationError({"month": str(exc)}) from None
