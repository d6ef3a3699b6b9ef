"""Node agent credentials and AKs, as actions: issue a credential (shown once), find the
node a credential belongs to, revoke an AK. Each runs in one transaction with its audit
row, the ledger outbox row and dashboard events after commit."""

from __future__ import annotations

from django.db import transaction

from webapp.core import tokens
from webapp.core.events import audit, publish_on_commit
from webapp.fleet.models import Node
from webapp.outbox.records import (
    enqueue,
)

NODE_TOKEN_KIND = "wn"


def issue_node_credential(node: Node, *, actor: str) -> str:
    """A fresh bearer token for the node's agent; the previous one stops working."""
    new = tokens.new_token(NODE_TOKEN_KIND)
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(
            credential_prefix=new.prefix, credential_digest=new.digest
        )
        audit(actor, "node.credential_issued", node)
    return new.token


def node_for_token(token: str) -> Node | None:
    parsed = tokens.parse(NODE_TOKEN_KIND, token)
    if parsed is None:
        return None
    node = Node.objects.filter(credential_prefix=parsed[0]).select_related("pcr_policy").first()
    if node is None or not tokens.matches(node.credential_digest, parsed[1]):
        return None
    return node


def revoke_ak(node: Node, *, actor: str) -> Node:
    """Forget the node's AK: it is unleasable until its agent enrols again."""
    with transaction.atomic():
        old = node.ak_name
        Node.objects.filter(pk=node.pk).update(
            ak_public=None,
            ak_name="",
            status=Node.ENROLLING,
            trust=Node.UNKNOWN,
            last_good_attestation=None,
        )
        audit(actor, "node.ak_revoked", node, ak_name=old)
        if old:
            enqueue(
                f"node:{node.name}:ak:{old}:revoke",
                "RevokeAK",
                {"node_id": node.name, "reason": f"revoked by {actor}"},
            )
        publish_on_commit("node", name=node.name, trust=Node.UNKNOWN)
    node.refresh_from_db()
    return node
