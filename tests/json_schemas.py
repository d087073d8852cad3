"""Every `--json` document a test sees is checked against its schema (`fp16studio schema`):
`valid` for a document in hand, `parsed` for a command's stdout; tests/core/conftest.py checks
every document an in-process `main([... "--json"])` prints."""

import functools
import json

import jsonschema

from fp16studio.core.present.schemas import document_schema


@functools.cache
def _validator(name: str):
    schema = document_schema(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def valid(name: str, doc):
    """`doc`, once it fits the schema of the document `name` (a pytest failure saying where
    it does not)."""
    errors = sorted(_validator(name).iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, f"{name} document does not fit its schema: " + "; ".join(
        f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in errors[:5])
    return doc


def parsed(name: str, text: str, **loads):
    """A command's stdout read as its JSON document, checked against its schema."""
    return valid(name, json.loads(text, **loads))
