"""The node agent's API: enrol (EK + AK, credential activation), fetch a challenge, answer
it with a quote. Thin: the decisions are in webapp.attestation.actions (enrolment, quotes)."""

from __future__ import annotations

import base64

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.attestation import actions, health
from webapp.attestation.api import serializers as s
from webapp.attestation.api.authentication import IsNodeAgent, NodeCredentialAuthentication

CHALLENGE_RETRY_AFTER_S = 0.5  # the relay commits a challenge within a block or two


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def selection_of(node) -> str:
    """The node's policy PCRs in tpm2-tools' syntax (attest.policy.selection_text)."""
    return actions.policy_of(node).selection_text()


class AgentView(APIView):
    authentication_classes = [NodeCredentialAuthentication]
    permission_classes = [IsNodeAgent]
    serializer_class: type | None = None

    def post(self, request):
        form = self.serializer_class(data=request.data) if self.serializer_class else None
        if form is not None:
            form.is_valid(raise_exception=True)
        try:
            return self.act(
                request.user.node, form.validated_data if form else {}, actor=str(request.user)
            )
        except actions.EnrolmentRefused as refused:
            # the API's one error format, with the verifier's structured reasons beside it
            return Response(
                {"detail": str(refused), "code": "attestation.refused", "reasons": refused.reasons},
                status=status.HTTP_400_BAD_REQUEST,
            )


@extend_schema(request=s.EnrolSerializer, responses=dict)
class EnrolView(AgentView):
    serializer_class = s.EnrolSerializer

    def act(self, node, data, actor):
        challenge = actions.start_enrolment(
            node,
            ek_public=data["ek_public"],
            ek_certificate=data.get("ek_certificate"),
            ak_public=data["ak_public"],
            actor=actor,
        )
        return Response(
            {
                "credential_blob": b64(challenge.credential_blob),
                "secret": b64(challenge.secret),
                # every organisation's registrar's own round, for the TPM to answer too
                "registrar_challenges": challenge.registrar_challenges,
                # what the enrolment quote covers: the inventory digest names the node, and
                # the quote selects the policy's PCRs
                "node_id": node.name,
                "selection": selection_of(node),
            }
        )


@extend_schema(request=s.ActivateSerializer, responses=dict)
class ActivateView(AgentView):
    serializer_class = s.ActivateSerializer

    def act(self, node, data, actor):
        evidence = data["enrolment_quote"]
        reported = actions.InventoryQuote(
            inventory=[dict(gpu) for gpu in data["inventory"]],
            quote=evidence["quote"],
            signature=evidence["signature"],
            pcr_values=evidence["pcr_values"],
        )
        node = actions.finish_enrolment(
            node,
            answer=data["answer"],
            enrolment_quote=reported,
            actor=actor,
            registrar_answers=[dict(a) for a in data.get("registrar_answers", [])],
        )
        return Response({"node": node.name, "ak_name": node.ak_name, "status": node.status})


@extend_schema(request=None, responses=dict)
class ChallengeView(AgentView):
    def act(self, node, data, actor):
        nonce = actions.issue_challenge(node)
        if nonce is None:  # the ledger is issuing one: ask again shortly
            return Response(
                {"pending": True, "retry_after_s": CHALLENGE_RETRY_AFTER_S},
                status=status.HTTP_202_ACCEPTED,
            )
        return Response(
            {
                # when the agent should come for its next challenge
                "interval_s": settings.ATTESTATION_INTERVAL_S,
                "nonce": nonce.hex(),
                "selection": selection_of(node),
            }
        )


@extend_schema(request=s.QuoteSerializer, responses=dict)
class QuoteView(AgentView):
    serializer_class = s.QuoteSerializer

    def act(self, node, data, actor):
        attestation = actions.record_quote(
            node,
            nonce=bytes.fromhex(data["nonce"]),
            quote=data["quote"],
            signature=data["signature"],
            pcr_values=data["pcr_values"],
            actor=actor,
            telemetry=data.get("telemetry", ""),
        )
        return Response(
            {
                "attestation": attestation.pk,
                "valid": attestation.valid,
                "reasons": attestation.reasons,
            }
        )


@extend_schema(request=s.ReportSerializer, responses=dict)
class ReportView(AgentView):
    """The agent's word that it stopped: its TPM refused an authorisation it must not retry."""

    serializer_class = s.ReportSerializer

    def act(self, node, data, actor):
        event = health.agent_reported(node, code=data["code"], detail=data["detail"], actor=actor)
        return Response({"event": event.pk, "code": event.code})
