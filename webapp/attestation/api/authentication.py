"""Node agents authenticate with their node credential: `Authorization: Bearer wn_…`."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from webapp.attestation.actions import node_for_token
from webapp.core.api.throttling import NODE_SCOPE, AuthFailureBudget
from webapp.fleet.models import Node


class NodePrincipal:
    is_authenticated = True
    throttle_scope = NODE_SCOPE  # caps each node's attestation traffic

    def __init__(self, node: Node) -> None:
        self.node = node
        self.throttle_ident = node.pk

    def __str__(self) -> str:
        return f"agent of {self.node.name}"


class NodeCredentialAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0] != "Bearer":
            return None
        with AuthFailureBudget(request):  # a failure keeps its hit of the address's budget
            node = node_for_token(header[1]) if len(header) == 2 else None
            if node is None:
                raise exceptions.AuthenticationFailed("Invalid node credential.")
        return NodePrincipal(node), None

    def authenticate_header(self, request):
        return "Bearer"


class NodeCredentialScheme(OpenApiAuthenticationExtension):
    """How the OpenAPI schema describes the node credential: a bearer token."""

    target_class = NodeCredentialAuthentication
    name = "nodeCredential"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "wn_<prefix>.<secret>"}


class IsNodeAgent(permissions.BasePermission):
    def has_permission(self, request, view):
        return isinstance(request.user, NodePrincipal)
