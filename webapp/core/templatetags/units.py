"""People's units on every page: the one place that turns the ledger's integers into what a
tenant or an operator reads. Money in the currency with sensible precision and the exact
micro-units on hover; times in the viewer's time zone (webapp.core.timezones) with the zone
named; intervals as start–end plus a duration; energy in kWh; states and advice as words.
Downloads and the API keep the exact integers; nothing here is used to compute a price.

`{% load units %}`, then e.g. `{{ line.total_micro|money:currency }}`,
`{{ lease.started|when }}`, `{% interval line.start_ms line.end_ms %}`,
`{{ mj|kwh }}`, `{{ lease.state|word }}`."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django import template
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, pgettext_lazy

from ledger.money import MICRO_PER_UNIT
from ledger.units import MJ_PER_KWH, MS_PER_HOUR, MS_PER_S, datetime_of_ms, pue_of_milli

register = template.Library()

S_PER_MIN = 60
MIN_PER_HOUR = 60
HOURS_PER_DAY = 24
MONEY_PLACES = 2  # an amount of at least a tenth of the currency unit: cents
CENTS_FROM = Decimal("0.1")
SMALL_SIGNIFICANT = 3  # below a tenth: three significant digits (0.00268)
MAX_PLACES = 6  # the ledger's micro-unit: no amount has more
SIGNIFICANT_DIGITS = 3
SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£", "CNY": "¥", "JPY": "¥"}

# the codes the ledger, the state machine and the advice use, as a person says them
WORDS = {
    # lease states (webapp.leasing.states)
    "requested": pgettext_lazy("lease state", "requested"),
    "placed": pgettext_lazy("lease state", "placed"),
    "active": pgettext_lazy("lease state", "running"),
    "ending": pgettext_lazy("lease state", "ending, to be settled"),
    "settled": pgettext_lazy("lease state", "settled"),
    "cancelled": pgettext_lazy("lease state", "cancelled"),
    "preempted": pgettext_lazy("lease state", "preempted"),
    "failed": pgettext_lazy("lease state", "failed"),
    # scaling advice (scheduler.advice)
    "scale_up": gettext_lazy("add capacity"),
    "scale_down": gettext_lazy("release capacity"),
    "hold": gettext_lazy("keep as is"),
    # node trust and status (webapp.fleet)
    "trusted": gettext_lazy("trusted"),
    "untrusted": gettext_lazy("not trusted"),
    "unknown": gettext_lazy("not yet attested"),
    "quarantined": gettext_lazy("quarantined"),
    "retired": gettext_lazy("retired"),
    # bill-line verdicts and outbox states
    "ok": gettext_lazy("checks out"),
    "pending": gettext_lazy("pending"),
    "sent": gettext_lazy("on the ledger"),
    "measured": gettext_lazy("measured"),
    "datasheet": gettext_lazy("datasheet"),
}


# the steps of a lease's story (webapp.leasing.story: audit actions without "lease.")
STEPS = {
    "requested": pgettext_lazy("lease step", "requested"),
    "placed": pgettext_lazy("lease step", "placed on GPUs"),
    "active": pgettext_lazy("lease step", "started running"),
    "migrated": pgettext_lazy("lease step", "moved to other GPUs"),
    "move_settled": pgettext_lazy("lease step", "settled up to the move"),
    "ending": pgettext_lazy("lease step", "ended"),
    "preempted": pgettext_lazy("lease step", "preempted"),
    "failed": pgettext_lazy("lease step", "failed"),
    "cancelled": pgettext_lazy("lease step", "cancelled"),
    "settled": pgettext_lazy("lease step", "settled"),
}


def _grouped(value: Decimal, places: int) -> str:
    return formats.number_format(value, decimal_pos=places, use_l10n=True, force_grouping=True)


def _places(value: Decimal) -> int:
    """Cents from a tenth of a unit up; below it enough places for SMALL_SIGNIFICANT
    digits, up to the micro-unit."""
    if value == 0 or abs(value) >= CENTS_FROM:
        return MONEY_PLACES
    leading_zeros = -abs(value).adjusted() - 1  # 0.00268 -> 2
    return min(MAX_PLACES, max(MONEY_PLACES, leading_zeros + SMALL_SIGNIFICANT))


def money_text(micro: int, currency: str = "") -> str:
    """`micro` micro-units as the currency with sensible precision ("€1,234.57", "€0.00268")."""
    value = Decimal(micro) / MICRO_PER_UNIT
    places = _places(value)
    number = _grouped(abs(value).quantize(Decimal(1).scaleb(-places)), places)
    sign = "−" if value < 0 else ""
    symbol = SYMBOLS.get(currency)
    if symbol:
        return f"{sign}{symbol}{number}"
    return f"{sign}{number} {currency}".strip()


@register.filter
def money(micro: int | None, currency: str = ""):
    """An amount; the exact micro-units on hover (the title), as the ledger holds them."""
    if micro is None or micro == "":
        return "—"
    micro = int(micro)
    exact = _("exactly %(micro)s micro-units (millionths) of %(currency)s") % {
        "micro": _grouped(Decimal(micro), 0),
        "currency": currency or _("the currency"),
    }
    return format_html(
        '<span class="money" title="{}">{}</span>', exact, money_text(micro, currency)
    )


@register.filter
def rate(micro: int | None, currency: str = ""):
    """A rate in micro-units per something (per GPU-hour, per kWh): the amount, exactly."""
    return money(micro, currency)


def _significant(value: Decimal, digits: int) -> str:
    if value == 0:
        return "0"
    places = max(0, digits - value.adjusted() - 1)
    return _grouped(value.quantize(Decimal(1).scaleb(-places)), places)


@register.filter
def kwh(mj: int | None):
    """Energy in kWh (three significant digits), the exact mJ on hover."""
    if mj is None or mj == "":
        return "—"
    mj = int(mj)
    text = _significant(Decimal(mj) / MJ_PER_KWH, SIGNIFICANT_DIGITS)
    title = _("exactly %(mj)s mJ") % {"mj": _grouped(Decimal(mj), 0)}
    return format_html('<span class="energy" title="{}">{} kWh</span>', title, text)


@register.filter
def pue(milli: int | None) -> str:
    """A PUE in thousandths as the ratio people quote (1.12)."""
    if milli is None or milli == "":
        return "—"
    return _grouped(pue_of_milli(int(milli)), 2)


def _as_datetime(value: datetime | int | None) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    return datetime_of_ms(int(value))  # ms since the epoch


def _zone(moment: datetime) -> str:
    return moment.tzname() or str(timezone.get_current_timezone())


@register.filter
def when(value: datetime | int | None):
    """A moment (a datetime, or ms since the epoch) in the viewer's zone, the zone named."""
    moment = _as_datetime(value)
    if moment is None:
        return "—"
    local = timezone.localtime(moment)
    text = f"{local:%Y-%m-%d %H:%M:%S} {_zone(local)}"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        moment.astimezone(UTC).isoformat(timespec="milliseconds"),
        str(timezone.get_current_timezone()),
        text,
    )


@register.filter
def duration(ms: int | None) -> str:
    """A length of time in the two largest units that matter ("1 h 5 min", "42 s")."""
    if ms is None or ms == "":
        return "—"
    ms = int(ms)
    seconds, rest = divmod(ms, MS_PER_S)
    if seconds < S_PER_MIN:
        if seconds < 10 and rest:
            return _("%(s)s s") % {"s": _grouped(Decimal(ms) / MS_PER_S, 1)}
        return _("%(s)s s") % {"s": seconds}
    minutes, seconds = divmod(seconds, S_PER_MIN)
    if minutes < MIN_PER_HOUR:
        return _("%(m)s min %(s)s s") % {"m": minutes, "s": seconds}
    hours, minutes = divmod(minutes, MIN_PER_HOUR)
    if hours < HOURS_PER_DAY:
        return _("%(h)s h %(m)s min") % {"h": hours, "m": minutes}
    days, hours = divmod(hours, HOURS_PER_DAY)
    return ngettext("%(d)s day %(h)s h", "%(d)s days %(h)s h", days) % {"d": days, "h": hours}


@register.filter
def hours(ms: int | None) -> str:
    """Milliseconds as hours: to the hundredth from one hour up ("1.50"), three significant
    digits below ("0.0253"), so a product shown beside it can be checked by hand."""
    if ms is None or ms == "":
        return "—"
    value = Decimal(int(ms)) / MS_PER_HOUR
    if value >= 1:
        return _grouped(value, 2)
    return _significant(value, SIGNIFICANT_DIGITS)


@register.simple_tag
def interval(start: datetime | int | None, end: datetime | int | None):
    """start–end in the viewer's zone (the date once when both fall on one day) and the
    duration between them."""
    first, last = _as_datetime(start), _as_datetime(end)
    if first is None:
        return "—"
    a = timezone.localtime(first)
    if last is None:
        return format_html("{} – …", f"{a:%Y-%m-%d %H:%M:%S}")
    b = timezone.localtime(last)
    tail = f"{b:%H:%M:%S}" if a.date() == b.date() else f"{b:%Y-%m-%d %H:%M:%S}"
    span = int((last - first).total_seconds() * MS_PER_S)
    return format_html(
        '<time datetime="{}">{}</time>–<time datetime="{}">{}</time> {} '
        '<span class="duration">({})</span>',
        first.astimezone(UTC).isoformat(timespec="milliseconds"),
        f"{a:%Y-%m-%d %H:%M:%S}",
        last.astimezone(UTC).isoformat(timespec="milliseconds"),
        tail,
        _zone(b),
        duration(span),
    )


@register.filter
def word(code: str | None) -> str:
    """A state, verdict or advice code as words in the page's language (the code itself
    when it has none)."""
    if code is None:
        return "—"
    found = WORDS.get(str(code))
    return str(found) if found is not None else str(code).replace("_", " ")


@register.filter
def step(code: str) -> str:
    """A step of a lease's story as words."""
    found = STEPS.get(str(code))
    return str(found) if found is not None else word(code)
