"""Reading the run's JSON files into typed records: each field checked once, by name.

Every file shardwise writes is a frozen dataclass with one ``to_json`` and one
``from_json``, which reads through :class:`Fields`: a field of the wrong type is refused
naming the file and the field (a bool is never an int), as NeMo Curator's
``_require_manifest_int`` does; a field with a default may be absent (older versions).
"""

import dataclasses
import functools
import json
import types
import typing
from typing import Any, Self, TypeVar

from shardwise.errors import RecordError

T = TypeVar("T")

#: Marks a field without a default (absent: refused).
_REQUIRED: Any = object()


def load_object(raw: bytes | str, where: str) -> dict[str, Any]:
    """The JSON object in ``raw``; RecordError naming ``where`` when it is not one."""
    try:
        data = json.loads(raw)
    except ValueError as e:  # also UnicodeDecodeError
        raise RecordError(where, f"not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise RecordError(where, "not a JSON object")
    return data


def _default(f: dataclasses.Field[Any]) -> Any:
    """A field's default (a fresh one from its factory), or ``_REQUIRED``."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _REQUIRED


@functools.cache
def _fields_of(cls: type) -> tuple[tuple[str, Any, dataclasses.Field[Any]], ...]:
    """A dataclass's fields with their type hints (resolved once per class: that costs
    more than reading a record)."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f) for f in dataclasses.fields(cls))


#: How the item types of arrays are named in messages.
_NAMES = {int: "integers", str: "strings"}
_ONE = {int: "an integer", str: "a string"}


def _is(value: Any, kind: type) -> bool:
    """``value`` is a ``kind`` (a bool is never an int)."""
    return type(value) is int if kind is int else isinstance(value, kind)


def _all(values: Any, kind: type) -> bool:
    """Every value is a ``kind`` (one pass, no call per item: summaries are read by the
    thousand)."""
    if kind is int:
        return all(type(v) is int for v in values)
    return all(isinstance(v, kind) for v in values)


@functools.cache
def _shape(hint: Any) -> tuple[bool, tuple[Any, ...], Any]:
    """A type hint taken apart once: whether None is allowed, the other types, and the
    first one's origin (``tuple`` for ``tuple[int, ...]``)."""
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    bases = tuple(o for o in options if o is not type(None))
    return type(None) in options, bases, typing.get_origin(bases[0]) or bases[0]


class Fields:
    """One JSON object read into a record: a getter per field, each checking its type."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    @classmethod
    def parse(cls, raw: bytes | str, where: str) -> Self:
        """The fields of the JSON object in ``raw``."""
        return cls(load_object(raw, where), where)

    @classmethod
    def of(cls, data: Any, where: str) -> Self:
        """The fields of ``data``, a JSON value already parsed; refused unless an object."""
        if not isinstance(data, dict):
            raise RecordError(where, f"must be an object, got {data!r}")
        return cls(data, where)

    def _get(self, key: str, default: Any, ok: type | tuple[type, ...], what: str) -> Any:
        """The value of ``key`` if it is of type ``ok``; ``default`` when absent or null (a
        required field absent is refused, and so is a bool where a number belongs)."""
        value = self.data.get(key)
        if value is None and default is not _REQUIRED:
            return default
        if key not in self.data:
            raise RecordError(self.where, f"field {key!r} is missing")
        is_bool = isinstance(value, bool) and ok not in (bool, object)
        if is_bool or not isinstance(value, ok):
            raise RecordError(self.where, f"field {key!r} must be {what}, got {value!r}")
        return value

    def int(self, key: str, default: Any = _REQUIRED) -> Any:
        """An integer (not a bool)."""
        return self._get(key, default, int, "an integer")

    def count(self, key: str, default: Any = _REQUIRED) -> Any:
        """An integer >= 0."""
        value = self.int(key, default)
        if isinstance(value, int) and value < 0:
            raise RecordError(self.where, f"field {key!r} must be a count >= 0, got {value!r}")
        return value

    def number(self, key: str, default: Any = _REQUIRED) -> Any:
        """An int or a float (not a bool), as given."""
        return self._get(key, default, (int, float), "a number")

    def str(self, key: str, default: Any = _REQUIRED) -> Any:
        """A string."""
        return self._get(key, default, str, "a string")

    def bool(self, key: str, default: Any = _REQUIRED) -> Any:
        """true or false."""
        return self._get(key, default, bool, "true or false")

    def dict(self, key: str, default: Any = _REQUIRED) -> Any:
        """A JSON object."""
        return self._get(key, default, dict, "an object")

    def list(self, key: str, default: Any = _REQUIRED) -> Any:
        """A JSON array."""
        return self._get(key, default, list, "an array")

    def any(self, key: str, default: Any = _REQUIRED) -> Any:
        """Any JSON value (a figure recorded for people, never decided on)."""
        return self._get(key, default, object, "a value")

    def objects(self, key: str, default: Any = _REQUIRED) -> tuple[Self, ...]:
        """The fields of each object of an array (absent: ``default``, itself a list)."""
        values = self.list(key, default)
        if not all(isinstance(v, dict) for v in values):
            raise self.refuse(key, "must be an array of objects")
        return tuple(Fields(v, f"{self.where} [{key}][{i}]") for i, v in enumerate(values))

    def _map(self, key: str, item: Any, default: Any) -> Any:
        """An object: of records (each value read into the dataclass ``item``), of
        integers or of strings (each value checked), or of anything else (as it is)."""
        values = self.dict(key, default)
        if not isinstance(values, dict):
            return values
        if dataclasses.is_dataclass(item):
            if not all(isinstance(v, dict) for v in values.values()):
                raise self.refuse(key, "must map names to objects")
            where = f"{self.where} [{key}]"
            return {k: Fields(v, f"{where}[{k}]").into(item) for k, v in values.items()}  # type: ignore[arg-type]
        if item not in (int, str):
            return values
        wrong = next((k for k, v in values.items() if not _is(v, item)), None)
        if wrong is not None:
            what = f"must be {_ONE[item]}, got {values[wrong]!r}"
            raise RecordError(f"{self.where} [{key}]", f"field {wrong!r} {what}")
        return values

    def sub(self, key: str) -> Self:
        """The fields of a nested object (absent: an empty one)."""
        return Fields(self.dict(key, {}), f"{self.where} [{key}]")

    def refuse(self, key: str, what: str) -> RecordError:
        """The error for a field that is of its type but not a valid value."""
        return RecordError(self.where, f"field {key!r} {what}")

    def into(self, cls: type[T], **given: Any) -> T:
        """The dataclass ``cls`` with every field read by its annotation (``given`` ones as
        they are): ``int`` is a count (>= 0, never a bool), ``float`` any number, a ``tuple``
        is read from an array (of records, each read by its own annotations, when its items
        are dataclasses), a dataclass from an object, ``dict[str, Record]`` from an object of
        objects; ``X | None`` and a field with a default may be absent."""
        values = dict(given)
        for name, hint, f in _fields_of(cls):
            if name not in values:
                values[name] = self._typed(name, hint, _default(f))
        return cls(**values)

    def _typed(self, key: str, hint: Any, default: Any) -> Any:
        """One field by its type hint (see :meth:`into`)."""
        nullable, bases, origin = _shape(hint)
        if nullable and default is _REQUIRED:
            default = None
        if len(bases) > 1:  # one of scalar types: ``float | str``
            kinds = tuple(o for b in bases for o in ((int, float) if b is float else (b,)))
            return self._get(key, default, kinds, " or ".join(b.__name__ for b in bases))
        base = bases[0]
        if origin is tuple:
            return self._tuple(key, base, default)
        if dataclasses.is_dataclass(origin):  # a nested record
            return self.sub(key).into(origin) if self.data.get(key) is not None else default
        if origin is dict:
            return self._map(key, (typing.get_args(base) or (str, None))[1], default)
        reader = {
            int: self.count,
            float: self.number,
            str: self.str,
            bool: self.bool,
            dict: self.dict,
            list: self.list,
        }.get(origin, self.any)
        return reader(key, default)

    def _tuple(self, key: str, hint: Any, default: Any) -> Any:
        """A tuple from an array: of records, each read by its own annotations, or of
        integers or strings, each checked."""
        value = self.list(key, default)
        if not isinstance(value, list):
            return value
        item = (typing.get_args(hint) or (None,))[0]
        if dataclasses.is_dataclass(item):
            return tuple(f.into(item) for f in self.objects(key))  # type: ignore[arg-type]
        if item in (int, str) and not _all(value, item):
            raise self.refuse(key, f"must be an array of {_NAMES[item]}, got {value!r}")
        return tuple(value)
