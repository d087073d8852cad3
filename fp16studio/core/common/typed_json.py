"""Typed values as JSON, for frames between processes: only the types a side names travel.

JSON has no tuples, no bytes, no dict keys but strings and no classes; a value that crosses
(a task's arguments, a Diagnosis with its tensor tree) needs them back as they were sent. Each
such value is an object tagged "$":

    {"$": "tuple", "items": [...]}    {"$": "bytes", "base64": "..."}
    {"$": "dict", "items": [[key, value], ...]}   (keys that are not strings, or a "$" key)
    {"$": "Finding", "code": ..., ...}   a registered type, by its constructor's fields (those
                                         at their default left out)
    {"$": "ref", "n": 3}   the 4th registered object already sent: one object sent twice
                           (a tree and the index over it) arrives as one object again

Decoding only ever calls the constructors a `TypedJson` was given by name (module:attribute,
imported on first use, so that naming a type imports nothing heavy): a frame from another
machine can build those and plain values, nothing else.
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import inspect

from .frames import FrameError, decode_body, encode_frame, read_body

_PLAIN = (str, int, float, bool, type(None))


class TypedJson:
    """`types`: {name: "module:Class"} or {name: ("module:Class", "module:factory")} where what
    is sent (an instance of Class, by its fields) arrives as factory(**fields)."""

    def __init__(self, types: dict):
        self._specs = dict(types)
        self._name_of: dict[type, str] = {}        # filled as names resolve
        self._fields: dict[type, tuple] = {}
        self._factories: dict[str, object] = {}

    def with_types(self, types: dict) -> "TypedJson":
        """These types and `types`."""
        return TypedJson({**self._specs, **types})

    # -- frames ---------------------------------------------------------------------------------
    def frame(self, value) -> bytes:
        return encode_frame(self.encode(value))

    def read(self, stream):
        """The next frame's value, typed; EOFError at a clean end, FrameError otherwise."""
        return self.decode(read_body(stream))

    def decode(self, body: bytes):
        """A frame body's value, typed (FrameError if it is not what encode makes)."""
        return decode_body(body, object_hook=self._decoder())

    # -- values ---------------------------------------------------------------------------------
    def encode(self, value):
        """`value` as plain JSON values; TypeError names what cannot travel."""
        memo: dict[int, int] = {}
        return self._encode(value, memo)

    def _encode(self, value, memo):
        kind = type(value)
        if kind in _PLAIN:
            return value
        if kind is list:
            return [self._encode(item, memo) for item in value]
        if kind is tuple:
            return {"$": "tuple", "items": [self._encode(item, memo) for item in value]}
        name = self._name_of.get(kind) or self._registered(kind)
        if name is not None:
            seen = memo.get(id(value))
            if seen is not None:
                return {"$": "ref", "n": seen}
            out = {"$": name}
            for field, default in self._fields[kind]:
                item = getattr(value, field)
                if type(item) is type(default) and item == default:
                    continue   # the constructor's own default: left out, built again there
                out[field] = item if type(item) in _PLAIN else self._encode(item, memo)
            memo[id(value)] = len(memo)   # numbered as finished: as the decoder builds them
            return out
        if isinstance(value, dict):
            if "$" not in value and all(type(key) is str for key in value):
                return {key: self._encode(item, memo) for key, item in value.items()}
            return {"$": "dict", "items": [[self._encode(key, memo), self._encode(item, memo)]
                                           for key, item in value.items()]}
        if isinstance(value, (bytes, bytearray)):
            return {"$": "bytes", "base64": base64.b64encode(value).decode("ascii")}
        for plain in (bool, int, float, str):   # a subclass's value (numpy's float64, an enum)
            if isinstance(value, plain):
                return plain(value)
        if isinstance(value, (list, tuple)):
            return self._encode(tuple(value) if isinstance(value, tuple) else list(value), memo)
        raise TypeError(f"a {kind.__module__}.{kind.__qualname__} cannot travel between processes")

    def _registered(self, kind: type) -> str | None:
        name = kind.__name__
        if name not in self._specs or _import(self._sent(name)) is not kind:
            return None
        # (name, default) of what the constructor takes; _NONE where there is no default.
        if dataclasses.is_dataclass(kind):
            fields = tuple((f.name, _default(f)) for f in dataclasses.fields(kind) if f.init)
        else:   # a plain class: its constructor's parameters, kept as attributes of those names
            fields = tuple((name, _NONE) for name in inspect.signature(kind).parameters)
        self._fields[kind] = fields
        self._name_of[kind] = name
        return name

    def _sent(self, name: str) -> str:
        spec = self._specs[name]
        return spec[0] if isinstance(spec, tuple) else spec

    def _factory(self, name: str):
        factory = self._factories.get(name)
        if factory is None:
            spec = self._specs.get(name)
            if spec is None:
                raise FrameError(f"a frame holds a {name!r}, which does not travel here")
            factory = self._factories[name] = _import(spec[1] if isinstance(spec, tuple) else spec)
        return factory

    def _decoder(self):
        built: list = []

        def hook(doc: dict):
            tag = doc.get("$")
            if tag is None:
                return doc
            try:
                if tag == "tuple":
                    return tuple(doc["items"])
                if tag == "ref":
                    return built[doc["n"]]
                if tag == "dict":
                    return {key: item for key, item in doc["items"]}
                if tag == "bytes":
                    return base64.b64decode(doc["base64"])
                factory = self._factory(tag)
                del doc["$"]
                value = factory(**doc)
            except FrameError:
                raise
            except Exception as exc:  # noqa: BLE001 - whatever a bad frame makes a constructor say
                raise FrameError(f"a frame holds a bad {tag!r}: {type(exc).__name__}: {exc}") from None
            built.append(value)
            return value

        return hook


class _NoDefault:
    """What no field value is of the type of."""


_NONE = _NoDefault()


def _default(field: dataclasses.Field):
    """The field's default value (a factory's: what it makes, only compared with, never given)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return _NONE


def _import(spec: str):
    module, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module), attribute)
