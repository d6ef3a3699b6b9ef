"""Saving and deleting an operator's edit of a row, each with its audit row: what the apps'
`save_*` / `delete_*` actions share (the admin's forms call those actions from save_model).

`save_audited` takes an object holding the new values (as a form leaves it), locks the stored
row, and writes the fields that differ plus one audit row naming each change as [old, new];
an edit that changes nothing writes nothing. A new object is created with one audit row
holding its values. The caller's action owns the transaction's other effects."""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction

from webapp.core.events import audit

Changes = dict[str, list[Any]]  # field name -> [old, new], JSON-safe


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, memoryview)):
        return bytes(value).hex()
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _fields(obj: models.Model) -> list[models.Field]:
    return [f for f in obj._meta.concrete_fields if not f.primary_key]


def values_of(obj: models.Model) -> dict[str, Any]:
    """The object's stored fields, JSON-safe (a foreign key as its id)."""
    return {f.name: _jsonable(f.value_from_object(obj)) for f in _fields(obj)}


def save_audited(obj: models.Model, *, actor: str, kind: str, **data: Any) -> Changes:
    """Create `obj` or write its changed fields, with one audit row `<kind>.created` or
    `<kind>.changed` (none for an edit that changes nothing). Returns the changes ({} for
    none; for a new object, each value as [None, value])."""
    with transaction.atomic():
        if obj._state.adding:
            obj.save()
            changes = {name: [None, value] for name, value in values_of(obj).items()}
            audit(actor, f"{kind}.created", obj, **data, values=values_of(obj))
            return changes
        stored = type(obj)._default_manager.select_for_update().get(pk=obj.pk)
        changes = {}
        for field in _fields(obj):
            old, new = field.value_from_object(stored), field.value_from_object(obj)
            if old != new:
                changes[field.name] = [_jsonable(old), _jsonable(new)]
        if not changes:
            return {}
        obj.save(update_fields=list(changes))
        audit(actor, f"{kind}.changed", obj, **data, changes=changes)
        return changes


def delete_audited(obj: models.Model, *, actor: str, kind: str, **data: Any) -> None:
    """Delete `obj` with one audit row `<kind>.deleted` holding what it was."""
    with transaction.atomic():
        audit(actor, f"{kind}.deleted", obj, **data, values=values_of(obj))
        obj.delete()
