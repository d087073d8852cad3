"""docs/contract.md is the contract, checked against the code: every finding code and its owner,
every command and option of the argument parser, every key of every document (from the schema
its definition generates). A name added to the code and not to the contract fails here, and so
does a name the contract promises that the code no longer has."""

import argparse
import re
from pathlib import Path

import pytest

from fp16studio.cli.parser import build_parser
from fp16studio.core.common.codec import SCHEMA_VERSION
from fp16studio.core.diagnostics import rules
from fp16studio.core.diagnostics.findings import CODES
from fp16studio.core.present.schemas import document_schema, document_types

CONTRACT = (Path(__file__).parents[2] / "docs" / "contract.md").read_text()
# The --json documents are described in §3, the files in §1 (the spec) and §7 (the session).
JSON_DOCUMENTS = ("diagnose", "fix", "trace", "bench", "drift", "fp8", "inspect")


def section(number: int) -> str:
    start = CONTRACT.index(f"\n## {number}. ")
    end = CONTRACT.find("\n## ", start + 1)
    return CONTRACT[start:end if end != -1 else None]


def table_rows(text: str) -> dict:
    """The first cell of each table row (its `name`) -> the row's other cells."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([^`]+)`", cells[0]) if line.startswith("|") else None
        if match:
            rows[match.group(1)] = cells[1:]
    return rows


def test_every_finding_code_is_in_the_contract_and_nothing_else_is():
    assert set(table_rows(section(2))) - {family.__name__.rpartition(".")[2]
                                          for family in rules.FAMILIES} == set(CODES)


def test_every_code_is_said_with_its_owner():
    owners = {name: cells for name, cells in table_rows(section(2)).items() if name not in CODES}
    for family in rules.FAMILIES:
        name = family.__name__.rpartition(".")[2]
        assert name in owners, f"owner {name} not in the contract's table of owners"
        said = set(re.findall(r"`([a-z0-9-]+)`", owners[name][0]))
        assert said == set(family.OWNS), (name, said ^ set(family.OWNS))


def commands() -> dict:
    """Each command -> its options' long names (and `-o` where that is the only name)."""
    parser = build_parser()
    found = {"": [a.option_strings for a in parser._actions if a.option_strings]}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = [a.option_strings for a in sub._actions
                               if a.option_strings and a.help != argparse.SUPPRESS]
    return {name: sorted({max(strings, key=len) for strings in options} - {"--help"})
            for name, options in found.items()}


@pytest.mark.parametrize("command", sorted(commands()))
def test_every_command_and_option_is_in_the_contract(command):
    text = section(3)
    if command:
        assert f"`fp16studio {command}" in text, f"command {command} not in the contract's table"
    for option in commands()[command]:
        assert re.search(rf"{re.escape(option)}\b", text), f"{command} {option} not in §3"


def keys_said(schema: dict, node: dict, seen: set) -> set:
    """Every key a document always has, at every level of fp16studio's own objects (the spec's
    keys are §1's, checked apart)."""
    keys = set()
    if "$ref" in node:
        name = node["$ref"].rpartition("/")[2]
        if name in seen or name == "PipelineSpec":
            return keys
        return keys_said(schema, schema["$defs"][name], seen | {name})
    for inner in node.get("anyOf", ()):
        keys |= keys_said(schema, inner, seen)
    if "items" in node:
        keys |= keys_said(schema, node["items"], seen)
    for key in node.get("required", ()) if node.get("additionalProperties") is False else ():
        keys.add(key)
        keys |= keys_said(schema, node["properties"][key], seen)
    return keys


@pytest.mark.parametrize("name", JSON_DOCUMENTS)
def test_every_key_of_every_document_is_in_the_contract(name):
    schema = document_schema(name)
    said = section(2) + section(3)   # a finding's and a fix's keys are §2's
    missing = {key for key in keys_said(schema, schema, set()) if f'"{key}"' not in said}
    assert not missing, f"{name}: {sorted(missing)} not in §2 or §3"


def test_the_spec_keys_are_the_contract_s_and_the_session_document_is_said():
    spec = document_schema("spec")["$defs"]["PipelineSpec"]["properties"]
    assert set(spec) == set(table_rows(section(1)))
    session = document_schema("session")["$defs"]["SessionDocument"]["properties"]
    assert all(f'"{key}"' in section(7) for key in session), session


def test_the_schema_section_names_every_document_and_the_version():
    text = section(7)
    assert all(f"`{name}`" in text for name in document_types())
    assert f"`{SCHEMA_VERSION}`" in text
