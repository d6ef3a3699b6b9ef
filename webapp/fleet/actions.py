"""Operator writes to sites, PCR policies, nodes and GPUs that are not attestation: each one
transaction, one audit row and, for a node, a dashboard event after commit (the admin's forms
call these from save_model)."""

from __future__ import annotations

from django.db import transaction

from webapp.core.audited import Changes, delete_audited, save_audited
from webapp.core.events import audit, publish_on_commit
from webapp.fleet import rate_card
from webapp.fleet.models import GPU, Node, PcrPolicy, Site


def quarantine_node(node: Node, *, actor: str) -> Node:
    """Take the node out of placement (no new leases); leases already on it keep running.
    The ledger holds no node status, so nothing is written there."""
    with transaction.atomic():
        node = Node.objects.select_for_update().get(pk=node.pk)
        if node.status != Node.QUARANTINED:
            previous = node.status
            node.status = Node.QUARANTINED
            node.save(update_fields=["status"])
            audit(actor, "node.quarantined", node, previous=previous)
            publish_on_commit("node", id=node.pk, status=node.status)
    return node


KINDS = {Site: "site", PcrPolicy: "pcr_policy", GPU: "gpu", Node: "node"}  # audit row prefixes


def save_node(node: Node, *, actor: str) -> Changes:
    """A node's edit by an operator: its site, PCR policy, TPM location or status (taking it
    out of quarantine puts it back into placement once its attestation is good)."""
    with transaction.atomic():
        changes = save_audited(node, actor=actor, kind="node")
        if "status" in changes:
            publish_on_commit("node", id=node.pk, status=node.status)
    return changes


def save_gpu(gpu: GPU, *, actor: str) -> Changes:
    return save_audited(gpu, actor=actor, kind="gpu", node=gpu.node.name)


def remove(obj: Site | PcrPolicy | GPU | Node, *, actor: str) -> None:
    """An operator deletes a site, a PCR policy, a GPU or a node (with its GPUs). What is
    still in use or is evidence is protected: a site or policy some node uses, a node with
    quotes or TPM events, a GPU with readings or attested batches. Django refuses
    (ProtectedError) and nothing is written."""
    delete_audited(obj, actor=actor, kind=KINDS[type(obj)])


def save_site(site: Site, *, actor: str) -> Changes:
    """A new site or a renamed one. The rate card prices sites by name, so the audit row says
    whether the card in force prices the new name (a site it does not name is not leased)."""
    priced = rate_card.site_rates(site.name) is not None
    return save_audited(site, actor=actor, kind="site", on_rate_card=priced)


def save_pcr_policy(policy: PcrPolicy, *, actor: str) -> Changes:
    """This server's copy of a PCR policy (golden values, age limit). The endorsers keep
    checking the version both organisations approved until this copy is proposed and approved
    on the ledger (fleet/admin.py shows the document to propose)."""
    policy.full_clean()
    return save_audited(policy, actor=actor, kind="pcr_policy")
