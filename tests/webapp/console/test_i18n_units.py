"""People's units and two languages: the units filters (webapp.core.templatetags.units) on
their own, pages chosen by Accept-Language or the switch, times in the viewer's zone, the
API's error codes the same in both languages, and the committed catalogue compiled from its
.po."""

from __future__ import annotations

import gettext
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.utils import timezone, translation

from tests.webapp import leases
from tests.webapp.helpers import console_login
from webapp.core.templatetags import units
from webapp.tenancy.models import Membership

LOCALE = Path(__file__).resolve().parents[3] / "webapp" / "locale" / "zh_Hans" / "LC_MESSAGES"
PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def english():
    """A page served in Chinese leaves its language active in the thread (LocaleMiddleware
    activates one per request): each test starts in English."""
    with translation.override("en"):
        yield


def test_money_has_sensible_precision_and_the_exact_micro_units_on_hover():
    assert units.money_text(1_234_567_891, "EUR") == "€1,234.57"
    assert units.money_text(2_675, "EUR") == "€0.00268"
    assert units.money_text(500_000, "EUR") == "€0.50"
    assert units.money_text(-41_200, "USD") == "−$0.0412"
    assert units.money_text(7, "XYZ") == "0.000007 XYZ"
    html = str(units.money(2_675, "EUR"))
    assert 'title="exactly 2,675 micro-units (millionths) of EUR"' in html and "€0.00268" in html
    assert units.money(None) == "—"


def test_energy_in_kwh_times_in_the_viewers_zone_and_durations():
    assert "1.00 kWh" in str(units.kwh(3_600_000_000))
    assert "0.000123 kWh" in str(units.kwh(442_800))
    assert 'title="exactly 442,800 mJ"' in str(units.kwh(442_800))
    moment = datetime(2026, 12, 3, 16, 0, tzinfo=UTC)
    with timezone.override("Asia/Shanghai"):
        assert "2026-12-04 00:00:00 CST" in str(units.when(moment))
        assert "2026-12-04 00:00:00 CST" in str(units.when(int(moment.timestamp() * 1000)))
    shown = str(units.interval(1_796_254_625_571, 1_796_254_631_836))
    assert "–" in shown and "UTC" in shown and "(6.2 s)" in shown
    assert units.duration(3_723_000) == "1 h 2 min" and units.duration(90_061_000) == "1 day 1 h"
    assert units.pue(1120) == "1.12" and units.hours(5_400_000) == "1.50"
    assert units.hours(90_965) == "0.0253"  # 0.025268 h: enough digits to check a product


def test_states_and_advice_are_words_in_the_pages_language():
    assert units.word("scale_down") == "release capacity" and units.word("active") == "running"
    with translation.override("zh-hans"):
        assert units.word("scale_down") == "释放容量" and units.word("active") == "运行中"
        assert units.money_text(1_500_000, "EUR") == "€1.50"
    assert units.word("something_new") == "something new"


@pytest.fixture
def login(tenant):
    return console_login(tenant, "ada", Membership.OWNER, PASSWORD)


def test_pages_follow_accept_language_and_the_switch(login, fleet):
    lease = leases.active(login.membership.tenant, fleet.gpus[:1])
    english = login.client.get("/console/").content.decode()
    assert '<html lang="en">' in english and "Leases of" in english
    chinese = login.client.get("/console/", HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9").content.decode()
    assert '<html lang="zh-hans">' in chinese and "的租约" in chinese and "运行中" in chinese
    page = login.client.get(f"/console/leases/{lease.pk}/", HTTP_ACCEPT_LANGUAGE="zh-CN")
    assert "报价" in page.content.decode() and 'id="language-select"' in page.content.decode()
    switched = login.client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/console/"})
    assert switched.status_code == 302
    assert "的租约" in login.client.get("/console/").content.decode()  # no header: the cookie


def test_times_are_shown_in_the_viewers_zone_named(login, fleet):
    lease = leases.active(login.membership.tenant, fleet.gpus[:1])
    login.client.cookies["tz"] = "Asia%2FShanghai"  # as zone.js writes it
    page = login.client.get(f"/console/leases/{lease.pk}/").content.decode()
    assert " CST</time>" in page
    login.client.cookies["tz"] = "../../etc/passwd"  # not a zone: UTC, named
    page = login.client.get(f"/console/leases/{lease.pk}/").content.decode()
    assert " UTC</time>" in page


def test_api_errors_keep_their_codes_in_chinese(owner, fleet):
    bad = {"gpu_count": 0, "precision": "FP4", "hours": "1"}
    english = owner.client.post("/api/v1/price-preview/", bad, format="json")
    chinese = owner.client.post(
        "/api/v1/price-preview/", bad, format="json", HTTP_ACCEPT_LANGUAGE="zh-CN"
    )
    assert english.status_code == chinese.status_code == 400
    assert english.json()["code"] == chinese.json()["code"]
    assert (
        set(english.json()["fields"])
        == set(chinese.json()["fields"])
        == {
            "gpu_count",
            "precision",
        }
    )


def test_the_committed_catalogue_is_its_po_compiled(tmp_path):
    """The .mo is committed so a clean clone needs no gettext; it must say what the .po says."""
    if shutil.which("msgfmt") is None:
        pytest.fail("msgfmt is missing: run 'make setup' (apt-get install gettext)")
    compiled = tmp_path / "django.mo"
    po = LOCALE / "django.po"
    subprocess.run(["msgfmt", "--check", "-o", str(compiled), str(po)], check=True)
    with compiled.open("rb") as fresh, (LOCALE / "django.mo").open("rb") as committed:
        assert (
            gettext.GNUTranslations(committed)._catalog == gettext.GNUTranslations(fresh)._catalog
        )
    untranslated = subprocess.run(
        ["msgattrib", "--untranslated", "--no-obsolete", str(po)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "msgid" not in untranslated.replace('msgid ""\nmsgstr ""', "", 1), untranslated
