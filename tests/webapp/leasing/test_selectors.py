"""The leasing reads other apps share (webapp.leasing.selectors): a caller sees its tenant's
leases and bill lines, and nobody else's."""

from __future__ import annotations

from tests.webapp import leases
from webapp.leasing import selectors
from webapp.tenancy.authentication import TenantPrincipal
from webapp.tenancy.models import ApiKey


def test_a_tenant_reads_its_own_leases_and_bill_lines_only(owner, outsider, fleet):
    mine = leases.settled(leases.active(owner.tenant, fleet.gpus[:1]))
    theirs = leases.settled(leases.active(outsider.tenant, fleet.gpus[1:2]))
    me = TenantPrincipal(ApiKey.objects.get(tenant=owner.tenant))
    assert list(selectors.tenant_leases(me)) == [mine]
    assert {line.lease_id for line in selectors.tenant_lines(me)} == {mine.pk}
    assert theirs.settlements.exists()


def test_a_caller_that_is_no_tenant_reads_nothing(owner, fleet):
    leases.settled(leases.active(owner.tenant, fleet.gpus[:1]))
    assert not selectors.tenant_leases(None).exists()
    assert not selectors.tenant_lines(object()).exists()
