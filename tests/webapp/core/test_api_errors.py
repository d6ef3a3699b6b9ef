"""Requests that used to end in a 500 are 4xx answers in the API's one error format:
{"detail", "code"} and, for invalid input, "fields"."""

from __future__ import annotations

import json

from django.urls import URLPattern, URLResolver, get_resolver

from webapp.leasing import actions
from webapp.leasing.models import Lease

REQUEST = {"gpu_count": 1, "precision": "BF16", "hours": "1"}


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = json.loads(response.content.decode("utf-8"))
    assert body["code"] == code, body
    assert isinstance(body["detail"], str) and body["detail"]
    return body


def _patterns(resolver: URLResolver, prefix: str = ""):
    for entry in resolver.url_patterns:
        here = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _patterns(entry, here)
        elif isinstance(entry, URLPattern):
            yield here, entry


def test_no_route_takes_a_format_suffix():
    with_format = [
        p for p, e in _patterns(get_resolver()) if "format" in e.pattern.regex.groupindex
    ]
    assert with_format == []


def test_json_suffix_is_a_404_not_a_500(owner):
    lease = actions.request_lease(owner.tenant, gpu_count=1, precision="FP16", hours=1, actor="t")
    for url in ("/api/v1/bills.json", "/api/v1/leases.json", f"/api/v1/leases/{lease.pk}/end.json"):
        assert owner.client.get(url).status_code == 404, url
        assert owner.client.post(url).status_code == 404, url


def test_migrate_of_a_lease_that_is_not_running_is_a_400(owner, fleet):
    lease_id = owner.client.post("/api/v1/leases/", REQUEST, format="json").json()["id"]
    refused = owner.client.post(
        f"/api/v1/leases/{lease_id}/migrate/", {"generation": "H100-SXM5-80GB"}, format="json"
    )
    body = assert_error(refused, 400, "lease.state")
    assert "only an active lease migrates" in body["detail"]
    assert Lease.objects.get(pk=lease_id).state == "requested"


def test_huge_limit_and_offset_are_bounded(owner):
    for _ in range(3):
        owner.client.post("/api/v1/leases/", REQUEST, format="json")
    huge = "99999999999999999999"
    page = owner.client.get(f"/api/v1/leases/?limit={huge}")
    assert page.status_code == 200
    assert len(page.json()["results"]) == 3
    assert owner.client.get(f"/api/v1/leases/?limit=2&offset={huge}").json()["results"] == []
    assert len(owner.client.get("/api/v1/leases/?limit=2").json()["results"]) == 2


def test_deeply_nested_json_is_a_400(owner):
    body = b"[" * 100_000 + b"]" * 100_000
    refused = owner.client.post("/api/v1/leases/", body, content_type="application/json")
    assert_error(refused, 400, "json.depth")
    assert not Lease.objects.exists()


def test_lone_surrogate_in_a_field_is_a_400(owner):
    raw = b'{"gpu_count": 1, "precision": "\\ud800", "hours": "1"}'
    refused = owner.client.post("/api/v1/leases/", raw, content_type="application/json")
    assert_error(refused, 400, "json.surrogate")
    assert not Lease.objects.exists()


def test_options_on_the_api_docs_is_a_405(owner):
    assert owner.client.options("/api/v1/docs/").status_code == 405
    assert owner.client.get("/api/v1/docs/").status_code == 200


def test_invalid_input_names_each_field(owner):
    refused = owner.client.post(
        "/api/v1/leases/", {**REQUEST, "gpu_count": 0, "precision": "FP4"}, format="json"
    )
    body = assert_error(refused, 400, "invalid")
    assert set(body["fields"]) == {"gpu_count", "precision"}
    assert "gpu_count" in body["detail"] and "precision" in body["detail"]


def test_authentication_and_not_found_share_the_format(owner, outsider):
    lease = actions.request_lease(owner.tenant, gpu_count=1, precision="FP16", hours=1, actor="t")
    assert_error(outsider.client.get(f"/api/v1/leases/{lease.pk}/"), 404, "not_found")
    owner.client.credentials(HTTP_AUTHORIZATION="Bearer wl_nope.nope")
    assert_error(owner.client.get("/api/v1/leases/"), 401, "authentication_failed")


def test_an_api_url_no_route_matches_answers_in_the_error_format(owner, settings):
    settings.DEBUG = False  # production: no technical 404 page
    missing = owner.client.get("/api/v1/no-such-thing/")
    body = assert_error(missing, 404, "not_found")
    assert "/api/v1/no-such-thing/" in body["detail"]
    assert owner.client.get("/no-such-page/")["Content-Type"].startswith("text/html")
