"""One codec for every document: JSON encoding, decoding and JSON Schema, derived from the
dataclass fields and their type hints, never written by hand per document.

A document class is a dataclass that inherits `Document` and annotates its fields precisely
(`list[Finding]`, `dict | None`, a TypedDict for an object of known keys). What a field's JSON
looks like is said once, in the field's metadata (`meta`):

- `key`: its name in the document (`cls` is written `class`);
- `skip`: never in a document (a cache, a path on this machine);
- `internal`: only in the full encoding (`full=True`) that crosses a process boundary, not in the
  `--json` document (the tensor tree);
- `enum`: the words it may hold (the schema says so, and decoding refuses others).

Class attributes add what is not a field: `__json_computed__` names properties written into the
document and ignored when it is read back (`ok`, a plan's `converted`); `__json_public__` maps a
key to the attribute the `--json` document takes it from instead (a trace's `spec` is the
recovered one, null when none was). A class may name in `__json_reader__` a classmethod that
reads its whole document itself (the spec: its own validation, with its messages).

The encoder and decoder of each class are written as Python source from its fields and compiled
once, as `dataclasses` writes `__init__`: a 21k-tensor tree costs no loop over fields per node.

Decoding is strict about types (one line saying where and what) and lenient about keys a newer
version added. Plain JSON values (`dict`, `list`, `Any`) pass through as they are; `bytes` (a
preview's thumbnail) are base64 text.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union

from .errors import InputError

# Bumped when a document's shape changes in a way a reader must know (a key renamed or
# dropped: never, by the contract; a key added: the minor part).
SCHEMA_VERSION = "1.1"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class DecodeError(InputError):
    """A document that does not fit its definition: where, and what is wrong, in one line."""


def meta(*, key: str | None = None, skip: bool = False, internal: bool = False,
         enum: tuple | None = None) -> dict:
    """A field's `metadata=` saying how it is written (see the module's docstring)."""
    return {"json": {"key": key, "skip": skip, "internal": internal, "enum": enum}}


class Document:
    """The derived `to_json`/`from_json` of a document dataclass."""

    def to_json(self, full: bool = False) -> dict:
        """The document (`full`: with the internal fields, for another process of ours)."""
        return _encoder(type(self), full)(self)

    @classmethod
    def from_json(cls, doc):
        """The object a document describes; DecodeError when it does not fit."""
        return decode(cls, doc)


def encode(value, full: bool = False):
    """Any value of a document type (a Document, a list of them, ...) as JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _encoder(type(value), full)(value)
    return _encode_plain(value)


def encoder(hint, full: bool = False):
    """The function writing values of type `hint` (`decode`'s other half, for a value whose
    type is said elsewhere: an engine task's arguments and result)."""
    key = (hint, full)
    found = _HINT_ENCODERS.get(key)
    if found is None:
        found = _HINT_ENCODERS[key] = _value_encoder(hint, full)
    return found


_HINT_ENCODERS: dict = {}


def decode(tp, doc, where=""):
    """`doc` read as type `tp` (a class, or a hint such as `list[Finding]`)."""
    return _decoder(tp)(doc, where)


def schema(cls, name: str | None = None) -> dict:
    """The JSON Schema (draft 2020-12) of documents of `cls`, with its version."""
    defs: dict = {}
    root = _schema(cls, defs)
    name = name or cls.__name__
    return {"$schema": SCHEMA_DIALECT,
            "$id": f"https://fp16studio.invalid/schemas/{SCHEMA_VERSION}/{name}.json",
            "title": name, "version": SCHEMA_VERSION, **root, "$defs": defs}


# -- fields --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Field:
    name: str          # the attribute
    key: str           # the document's key
    hint: Any
    required: bool     # no default: a document without it cannot be read
    default: Any
    internal: bool
    enum: tuple | None
    computed: bool = False
    public_from: str | None = None
    public_hint: Any = None


@functools.lru_cache(maxsize=None)
def _fields(cls) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)   # each base's hints in its own module
    public = getattr(cls, "__json_public__", {})
    out = []
    for f in dataclasses.fields(cls):
        opts = f.metadata.get("json", {})
        if opts.get("skip"):
            continue
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory
        key = opts.get("key") or f.name
        source = public.get(key)
        out.append(_Field(f.name, key, hints[f.name], required, default,
                          bool(opts.get("internal")), opts.get("enum"), public_from=source,
                          public_hint=_return_hint(getattr(cls, source)) if source else None))
    computed = getattr(cls, "__json_computed__", ())
    for key in computed:
        name = computed[key] if isinstance(computed, dict) else key
        out.append(_Field(name, key, _return_hint(getattr(cls, name)), False, None, False, None,
                          computed=True))
    return tuple(out)


def _return_hint(member):
    """What a property or a method returns, by its annotation."""
    function = member.fget if isinstance(member, property) else member
    return typing.get_type_hints(function).get("return", Any)


# -- encoding ------------------------------------------------------------------------------------
_ENCODERS: dict = {}


def _encoder(cls, full: bool):
    """The class's encoder, written as Python source from its fields and compiled once (as
    dataclasses writes __init__): a 21k-node tree is encoded without a loop over fields."""
    found = _ENCODERS.get((cls, full))
    if found is not None:
        return found
    fields = [f for f in _fields(cls) if full or not f.internal]
    namespace: dict = {}
    items = []
    for i, f in enumerate(fields):
        attr = f.public_from if (f.public_from and not full) else f.name
        member = getattr(cls, attr, None)
        read = f"obj.{attr}()" if f.computed and callable(member) and not isinstance(member, property) \
            else f"obj.{attr}"
        hint = f.public_hint if (f.public_from and not full) else f.hint
        # A scalar is its own JSON: read as it is, no call per value (a tree has 21k nodes).
        items.append(f"{f.key!r}: {read}" if _is_scalar(hint) else f"{f.key!r}: e{i}({read})")
    source = "def encode_object(obj):\n    return {" + ", ".join(items) + "}\n"
    exec(source, namespace)   # source made above from field names only
    encode_object = _ENCODERS[cls, full] = namespace["encode_object"]
    for i, f in enumerate(fields):   # after registering: a type that holds itself finds it
        public = f.public_from and not full
        namespace[f"e{i}"] = _value_encoder(f.public_hint if public else f.hint, full)
    return encode_object


def _identity(value):
    return value


def _is_scalar(hint) -> bool:
    """A str, int, float, bool or None, or a union or Literal of only those."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return all(isinstance(a, (str, int, float, bool, type(None))) for a in args)
    if origin in (Union, types.UnionType):
        return all(_is_scalar(a) for a in args)
    return hint in (str, int, float, bool, type(None), None)


def _value_encoder(hint, full: bool):
    """A function writing a value of type `hint`; the identity where nothing needs doing."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_dataclass_type(hint):
        return _encoder(hint, full)
    if _is_typed_dict(hint):
        return _typed_dict_encoder(hint, full)
    if hint is bytes:
        return lambda value: base64.b64encode(value).decode("ascii")
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        inner = [_value_encoder(a, full) for a in kinds]
        if all(e is _identity for e in inner):
            return _identity
        if len(inner) == 1 and inner[0] in (list, dict):
            make = inner[0]
            return lambda value: None if value is None else make(value)
        if len(inner) == 1:
            enc = inner[0]
            return lambda value: None if value is None else enc(value)
        return _union_encoder(kinds, inner)
    if origin in (list, tuple) and args:
        enc = _value_encoder(args[0], full)
        if enc is _identity:
            return list
        return lambda value: [enc(item) for item in value]
    if origin is dict and len(args) == 2:
        enc = _value_encoder(args[1], full)
        return dict if enc is _identity else (
            lambda value: {k: enc(v) for k, v in value.items()})
    if hint is Path:
        return lambda value: str(value)
    if hint in (tuple, list, dict, Any) or origin in (list, tuple, dict):
        return _encode_plain   # a copy: what the document holds never aliases the object
    return _identity


def _typed_dict_encoder(cls, full: bool):
    encoders = {key: _value_encoder(hint, full) for key, hint in typing.get_type_hints(cls).items()}
    encoders = {key: enc for key, enc in encoders.items() if enc is not _identity}

    def encode_typed_dict(value):
        out = _encode_plain(value)
        for key, enc in encoders.items():
            if key in value:
                out[key] = enc(value[key])
        return out
    return encode_typed_dict


def _union_encoder(kinds, encoders):
    """A value of one of `kinds`, written by the encoder of the first it is an instance of."""
    classes = [_runtime_class(kind) for kind in kinds]

    def encode_union(value):
        if value is None:
            return None
        for cls, enc in zip(classes, encoders):
            if cls is not None and isinstance(value, cls):
                return enc(value)
        return encode(value)
    return encode_union


def _runtime_class(hint):
    """What an instance of `hint` is an instance of (None: nothing to test by)."""
    if _is_typed_dict(hint):
        return dict
    origin = typing.get_origin(hint)
    if origin in (list, tuple, dict):
        return origin
    return hint if isinstance(hint, type) else None


def _encode_plain(value):
    """A plain JSON-like value: tuples become lists (the document's only sequence)."""
    if isinstance(value, (list, tuple)):
        return [_encode_plain(item) for item in value]
    if isinstance(value, dict):   # a spec's FrozenDict too: a plain one
        return {key: _encode_plain(item) for key, item in value.items()}
    return value


# -- decoding ------------------------------------------------------------------------------------
def _fail(where, problem: str):
    where = _path(where)
    raise DecodeError(f"{where}: {problem}" if where else problem)


def _path(where) -> str:
    """A place in the document, kept as (parent, key) pairs until a message needs it."""
    if not isinstance(where, tuple):
        return where
    parent, key = where
    parent = _path(parent)
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else str(key)


_KINDS = {str: "a string", bool: "true or false", int: "a whole number", float: "a number",
          dict: "an object", list: "a list", type(None): "null"}


def _kind(value) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _at(where, key):
    return (where, key)


_DECODERS: dict = {}


def _decoder(hint):
    found = _DECODERS.get(hint)
    if found is None:
        found = _DECODERS[hint] = _make_decoder(hint)
    return found


def _make_decoder(hint):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_dataclass_type(hint):
        return _object_decoder(hint)
    if _is_typed_dict(hint):
        return _typed_dict_decoder(hint)
    if hint is Any or hint is object:
        return lambda value, where: value
    if hint is type(None) or hint is None:
        return _scalar(type(None))
    if origin is Literal:
        allowed = args

        def decode_literal(value, where):
            if value not in allowed:
                _fail(where, f"{value!r} is not one of {', '.join(map(repr, allowed))}")
            return value
        return decode_literal
    if origin in (Union, types.UnionType):
        optional = type(None) in args
        inner = [_decoder(a) for a in args if a is not type(None)]

        def decode_union(value, where):
            if value is None and optional:
                return None
            problems = []
            for dec in inner:
                try:
                    return dec(value, where)
                except DecodeError as exc:
                    problems.append(str(exc))
            raise DecodeError(problems[0] if len(problems) == 1 else
                              f"{_path(where) or 'document'}: {_kind(value)} fits none of its types")
        return decode_union
    if origin in (list, tuple) or hint in (list, tuple):
        item = _decoder(args[0]) if args else (lambda value, where: value)
        make = tuple if (origin or hint) is tuple else list

        exact = args[0] if args and args[0] in (str, int) else None   # bool is not an int here
        big = sys.float_info.max

        def decode_sequence(value, where):
            if not isinstance(value, list):
                _fail(where, f"{_kind(value)}, not a list")
            if exact is not None and all(v.__class__ is exact and (exact is str or -big <= v <= big)
                                         for v in value):
                return make(value)   # a shape's ints: each one's decoder would say the same
            return make([item(v, (where, i)) for i, v in enumerate(value)])
        return decode_sequence
    if origin is dict or hint is dict:
        item = _decoder(args[1]) if len(args) == 2 else (lambda value, where: value)

        def decode_mapping(value, where):
            if not isinstance(value, dict):
                _fail(where, f"{_kind(value)}, not an object")
            return {k: item(v, _at(where, k)) for k, v in value.items()}
        return decode_mapping
    if hint is Path:
        string = _scalar(str)
        return lambda value, where: Path(string(value, where))
    if hint is bytes:
        return _decode_bytes
    if hint in (str, int, float, bool):
        return _scalar(hint)
    raise TypeError(f"the codec cannot read {hint!r}")


def _scalar(kind):
    def decode_scalar(value, where):
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
            _fail(where, f"{_kind(value)}, not {_KINDS[kind]}")
        if kind is int and abs(value) > sys.float_info.max:
            _fail(where, "a number too large")   # what reads it divides it as a float
        return value
    return decode_scalar


_MISSING = object()
_SCALARS = {str: "str", int: "int", float: "float", bool: "bool"}


def _object_decoder(cls):
    """The class's decoder, compiled from its fields like its encoder; a scalar field that has
    its own type is taken as it is, anything else goes through its type's decoder."""
    reader = getattr(cls, "__json_reader__", None)
    if reader:   # the class reads its own documents (the spec: its validation, its messages)
        return lambda doc, where: getattr(cls, reader)(doc)
    fields = [f for f in _fields(cls) if not f.computed]
    lines = ["def decode_object(doc, where):",
             "    if not isinstance(doc, dict):",
             "        fail(where, kind(doc) + ', not an object')",
             "    kw = {}"]
    for i, f in enumerate(fields):
        inner = [a for a in typing.get_args(f.hint) if a is not type(None)]
        optional = len(inner) == 1 and len(typing.get_args(f.hint)) == 2
        scalar = _SCALARS.get(inner[0] if optional else f.hint)
        lines += [f"    v = doc.get({f.key!r}, MISSING)",
                  "    if v is MISSING:",
                  f"        fail(where, {f'no {f.key!r}'!r})" if f.required else "        pass",
                  "    else:"]
        if scalar and scalar != "float":   # float: an int is read as one, by d{i}
            test = f"v.__class__ is not {scalar}"
            if scalar == "int":   # one too large for what reads it as a float: d{i} says so
                test += " or not -BIG <= v <= BIG"
            lines.append(f"        if {'v is not None and ' if optional else ''}({test}):")
            lines.append(f"            v = d{i}(v, (where, {f.key!r}))")
        else:
            lines.append(f"        v = d{i}(v, (where, {f.key!r}))")
        if f.enum is not None:
            lines += [f"        if v not in enum{i}:",
                      f"            fail((where, {f.key!r}), repr(v) + ' is not one this version knows')"]
        lines.append(f"        kw[{f.name!r}] = v")
    lines += ["    try:",
              "        return build(**kw)",
              "    except DecodeError:",
              "        raise",
              "    except (TypeError, ValueError, AssertionError, InputError) as exc:",
              "        fail(where, refused(exc))"]
    namespace = {"MISSING": _MISSING, "BIG": sys.float_info.max, "fail": _fail, "kind": _kind, "build": cls,
                 "DecodeError": DecodeError, "InputError": InputError,
                 "refused": lambda exc: f"not a {cls.__name__} ({_first_line(exc)})"}
    exec("\n".join(lines) + "\n", namespace)   # source made from field names only
    decode_object = _DECODERS[cls] = namespace["decode_object"]
    for i, f in enumerate(fields):   # after registering: a type that holds itself finds it
        namespace[f"d{i}"] = _decoder(f.hint)
        namespace[f"enum{i}"] = f.enum
    return decode_object


def _decode_bytes(value, where):
    if not isinstance(value, str):
        _fail(where, f"{_kind(value)}, not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        _fail(where, "not base64 text")


def _first_line(exc) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _typed_dict_decoder(cls):
    hints = typing.get_type_hints(cls)
    required = getattr(cls, "__required_keys__", frozenset())

    def decode_typed_dict(doc, where):
        if not isinstance(doc, dict):
            _fail(where, f"{_kind(doc)}, not an object")
        out = dict(doc)
        for key, hint in hints.items():
            if key in doc:
                out[key] = _decoder(hint)(doc[key], _at(where, key))
            elif key in required:
                _fail(where, f"no {key!r}")
        return out
    return decode_typed_dict


# -- schema --------------------------------------------------------------------------------------
def _schema(hint, defs: dict) -> dict:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if _is_dataclass_type(hint) or _is_typed_dict(hint):
        name = hint.__name__
        if name not in defs:
            defs[name] = {}   # placed first: a type that holds itself (TensorNode) refers back
            defs[name] = (_object_schema(hint, defs) if _is_dataclass_type(hint)
                          else _typed_dict_schema(hint, defs))
        return {"$ref": f"#/$defs/{name}"}
    if hint is Any or hint is object:
        return {}
    if hint is type(None) or hint is None:
        return {"type": "null"}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        return {"anyOf": [_schema(a, defs) for a in args]}
    if origin in (list, tuple) or hint in (list, tuple):
        return {"type": "array", **({"items": _schema(args[0], defs)} if args else {})}
    if origin is dict or hint is dict:
        return {"type": "object",
                **({"additionalProperties": _schema(args[1], defs)} if len(args) == 2 else {})}
    if hint is bytes:
        return {"type": "string", "contentEncoding": "base64"}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number", Path: "string"}
    if hint in simple:
        return {"type": simple[hint]}
    raise TypeError(f"no schema for {hint!r}")


def _object_schema(cls, defs: dict) -> dict:
    properties, required = {}, []
    for f in _fields(cls):
        prop = _schema(f.public_hint if f.public_from else f.hint, defs)
        properties[f.key] = {"enum": list(f.enum)} if f.enum is not None else prop
        if not f.internal:
            required.append(f.key)
    doc = (cls.__doc__ or "").strip()
    doc = "" if doc.startswith(f"{cls.__name__}(") else doc   # dataclass's own: the signature
    return {"type": "object", **({"description": doc.splitlines()[0]} if doc else {}),
            "properties": properties, "required": required, "additionalProperties": False}


def _typed_dict_schema(cls, defs: dict) -> dict:
    hints = typing.get_type_hints(cls)
    return {"type": "object",
            "properties": {key: _schema(hint, defs) for key, hint in hints.items()},
            "required": sorted(getattr(cls, "__required_keys__", ())),
            # an object of known keys from the engine: more may come (the contract adds keys)
            "additionalProperties": True}


def _is_dataclass_type(hint) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _is_typed_dict(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__annotations__") \
        and hasattr(hint, "__total__")
