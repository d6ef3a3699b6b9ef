"""Read-side serialisation without DRF's per-request field building.

A DRF `ModelSerializer` builds its fields (a deep copy of the declared ones plus one field
per model field, each inspected from the model) for every serializer instance, that is for
every request, and then looks each attribute up through `Field.get_attribute`'s general
path (dotted sources, callables, dictionaries). For a 20-lease list that was about a third
of the request's CPU (bench/web_profile.py). `FastReadSerializer` builds the fields once per
class and reads plain attributes directly; its output is DRF's own (each value still goes
through its field's `to_representation`), which tests/webapp/core/test_api_fast_paths.py checks
against the generic path.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db.models import Prefetch
from django.db.models.manager import BaseManager
from rest_framework import fields, relations, serializers

# Field types whose to_representation returns a model value unchanged (str(), int(), bool()
# of what the database driver already gave back).
_PASS_THROUGH = (fields.CharField, fields.IntegerField, fields.BooleanField)
_MANY = (relations.ManyRelatedField, serializers.ListSerializer)

Plan = list[tuple[str, str | None, Any]]  # output name, attribute (None: DRF's path), field
PREFETCHED = "_prefetched_%s"  # where `prefetched(name)` leaves a relation's rows: a list
_NOT_PREFETCHED = object()


def prefetched(relation: str) -> Prefetch:
    """Prefetch a many-valued relation into a plain list on each row, which the fast
    serializer reads: Django's default builds a filtered queryset per row to hold them
    (two per lease on a lease list, most of the prefetch's CPU)."""
    return Prefetch(relation, to_attr=PREFETCHED % relation)


class FastReadSerializer(serializers.ModelSerializer):
    """A ModelSerializer whose output is computed from a field plan built once per class.

    Only reading is sped up: validation and writes are the ModelSerializer's own. For
    serializers whose fields do not depend on the request (the plan is built without a
    context): no hyperlinks, no fields added or dropped per caller."""

    _plans: ClassVar[dict[type, Plan]] = {}

    @classmethod
    def _plan(cls) -> Plan:
        plan = FastReadSerializer._plans.get(cls)
        if plan is None:
            prototype = cls()  # bound once; the plan's fields never read their parent
            plan = []
            for field in prototype._readable_fields:
                # a foreign key goes through DRF's path, which reads `<name>_id` rather than
                # loading the related row
                simple = field.source_attrs == [field.field_name] and not isinstance(
                    field, relations.RelatedField
                )
                plan.append((field.field_name, field.field_name if simple else None, field))
            FastReadSerializer._plans[cls] = plan
        return plan

    def to_representation(self, instance: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        rows = instance.__dict__
        for name, attribute, field in self._plan():
            if attribute is None:  # a dotted or '*' source: DRF's general lookup
                value = field.get_attribute(instance)
            elif isinstance(field, _MANY):
                value = rows.get(PREFETCHED % attribute, _NOT_PREFETCHED)
                if value is _NOT_PREFETCHED:  # the relation's manager, one query
                    value = getattr(instance, attribute)
                    value = value.all() if isinstance(value, BaseManager) else value
            else:
                value = getattr(instance, attribute)
            if value is None:
                out[name] = None
            elif type(field) in _PASS_THROUGH and isinstance(value, str | int):
                out[name] = value
            else:
                out[name] = field.to_representation(value)
        return out
