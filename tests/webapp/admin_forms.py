"""Post an admin change form as a browser would: read the page's form (every input, select and
textarea, inlines and their management forms included), change some fields, post it back."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client

SUBMIT_NAMES = {"_save", "_continue", "_addanother", "_saveasnew"}


class _FormFields(HTMLParser):
    """The values a browser would submit from the page's model form (`<form id="<model>_form">`;
    the header's logout button is a POST form of its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.data: list[tuple[str, str]] = []
        self.in_form = False
        self.done = False
        self.select: str | None = None
        self.select_value: str | None = None
        self.first_option: str | None = None
        self.textarea: str | None = None
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("id", "").endswith("_form") and not self.done:
            self.in_form = True
        if not self.in_form:
            return
        name = a.get("name")
        if tag == "input" and name and name not in SUBMIT_NAMES:
            kind = a.get("type", "text").lower()
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self.data.append((name, a.get("value", "on")))
            elif kind not in ("submit", "button", "file", "image"):
                self.data.append((name, a.get("value", "")))
        elif tag == "select" and name:
            self.select, self.select_value, self.first_option = name, None, None
        elif tag == "option" and self.select is not None:
            value = a.get("value", "")
            if self.first_option is None:
                self.first_option = value
            if "selected" in a:
                self.select_value = value
        elif tag == "textarea" and name:
            self.textarea, self.text = name, []

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.in_form:
            self.in_form, self.done = False, True
        elif tag == "select" and self.select is not None:
            value = self.select_value if self.select_value is not None else self.first_option
            self.data.append((self.select, value or ""))
            self.select = None
        elif tag == "textarea" and self.textarea is not None:
            self.data.append((self.textarea, "".join(self.text).lstrip("\n")))
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            self.text.append(data)


def form_data(client: Client, url: str) -> dict[str, Any]:
    """What the change (or add) form at `url` holds now, as POST data."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    parser = _FormFields()
    parser.feed(response.content.decode())
    data: dict[str, Any] = {}
    for name, value in parser.data:
        if name in data:  # a multiple select or repeated checkbox
            data[name] = [*([data[name]] if isinstance(data[name], str) else data[name]), value]
        else:
            data[name] = value
    return data


def post_form(client: Client, url: str, **changes: Any) -> Any:
    """Post the form at `url` with `changes` applied; the admin redirects when it saved."""
    data = form_data(client, url)
    data.update({k: v for k, v in changes.items() if v is not None})
    for name in [k for k, v in changes.items() if v is None]:
        data.pop(name, None)  # an unchecked checkbox sends nothing
    data["_save"] = "Save"
    return client.post(url, data)


def staff_client(*permissions: str, username: str = "operator") -> tuple[Client, Any]:
    """A logged-in staff user (not a superuser) holding `permissions` ("app_label.codename")."""
    user = get_user_model().objects.create_user(username, "", "a-long-test-password")
    user.is_staff = True
    user.save()
    for permission in permissions:
        app_label, codename = permission.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client, user
