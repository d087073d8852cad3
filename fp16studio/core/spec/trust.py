"""Consent before a spec or session runs code (CONTRACT §6), the way Jupyter trusts notebooks.

A spec runs code of two kinds: its `preprocess` function, and with `trust_remote_code` the
model's own Python files (`auto_map`). A spec or session read from a file runs either only when
the file's content, together with that code (the preprocess file; the .py files of the model
and of each folder or Hub repository its `auto_map` names, a Hub repository with the commit its
revision resolves to in the cache), is in the trust store: a
list of SHA-256 digests in the config folder. A digest gets there when the user says so (the
CLI's `--trust`, the window's question) or when fp16studio itself writes the file (a spec or
session saved by the app, the demo): that is how "the user wrote it" is known. Any change to
the spec or the code gives a new digest, so a changed file is asked about again. Specs built in
memory (the window's form, the Python API) are the user's own and need no consent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..common.codec import Document
from ..common.config_folder import config_list, update_config_list
from ..common.errors import InputError
from ..common.files import expand_user, read_bytes
from ..common.hub_cache import cached_snapshot, looks_like_repo_id
from .value import PipelineSpec

STORE = "trusted.json"
STORE_LIMIT = 2000  # newest digests kept; an old one forgotten only means one more question


class UntrustedCode(InputError):
    """A spec from a file would run code the user has not agreed to run."""


def runs_code(spec: PipelineSpec) -> bool:
    return bool(spec.preprocess or spec.trust_remote_code)


def consent_needed(path: str | Path, spec: PipelineSpec) -> str | None:
    """What would run without consent, in words for a question to the user; None when nothing
    would (no code, or this content was trusted before)."""
    if not runs_code(spec):
        return None
    reading = read_code(path, spec)
    return None if reading.key in _read_store() else reading.question


def consent(path: str | Path | None, spec: PipelineSpec, ask: Callable[[str], bool],
            reading: "CodeToRun | None" = None) -> tuple[bool, str | None]:
    """May `spec`, read from the file `path`, run its code? (granted, the question asked or
    None.) Content not trusted yet is asked about (`ask(question)`) and a yes is recorded; a
    spec made in memory (`path` None) is the user's own and runs freely. Each file is read
    once: the content asked about is the content recorded and pinned for this process
    (`check_agreed`), so a preprocess swapped meanwhile (while the question is open, while
    the model loads) is refused, never run. `reading`: the code as the engine that runs it
    read it (`read_code` on a box, where its files are); None: read here."""
    if path is None or not runs_code(spec):
        for key in _pin_keys(spec):
            _AGREED.pop(key, None)
        return True, None
    if reading is None:
        for key in _pin_keys(spec):
            _AGREED[key] = ""   # nothing agreed to until this content is read and agreed to
        reading = read_code(path, spec)
    return consent_to(reading, ask)


def consent_to(reading: "CodeToRun", ask: Callable[[str], bool]) -> tuple[bool, str | None]:
    """May the code `reading` describes run? Asked (`ask(question)`) unless its digest is in
    the trust store; a yes is recorded, and its files' content pinned for this process."""
    for key in reading.pins:
        _AGREED[key] = ""
    question = None if reading.key in _read_store() else reading.question
    if question is not None:
        if not ask(question):
            return False, question
        _record(reading.key)
    _AGREED.update(reading.pins)
    return True, question


def require(path: str | Path, spec: PipelineSpec, grant: bool = False) -> None:
    """The command line's consent: raise UntrustedCode unless the spec's code is trusted or
    `grant` (--trust) trusts it now; what was agreed to is pinned (see `consent`)."""
    def answer(question: str) -> bool:
        if not grant:
            raise UntrustedCode(f"{question}, and this file has not been trusted: read that code, then "
                                "run again with --trust (remembered until the spec or the code changes)")
        return True
    consent(path, spec, answer)


def check_agreed(path: Path, content: bytes, what: str) -> None:
    """`content`, read from `path` to be run, must be what was consented to in this process
    (nothing pinned: a spec built in memory, the user's own, or a script traced here)."""
    agreed = _AGREED.get(str(path.resolve()))
    if agreed is not None and hashlib.sha256(content).hexdigest() != agreed:
        raise InputError(f"{what} {path}: changed since you agreed to run it; run again to be "
                         "asked about its new content")


def check_agreed_model_code(spec: PipelineSpec) -> None:
    """Before a trust_remote_code load imports the model's code: it must still be the code
    consented to in this process (none pinned: a spec built in memory, the user's own)."""
    key = _code_key(spec)
    agreed = _AGREED.get(key) if key else None
    if agreed is not None and model_code_digest(spec) != agreed:
        raise InputError(f"model {spec.model!r}: its code (trust_remote_code) changed since you "
                         "agreed to run it; run again to be asked about the new code")


def _pin_keys(spec: PipelineSpec) -> list[str]:
    """What `consent` pins for `spec`: its preprocess file, its model's code."""
    file = str(_preprocess_path(spec).resolve()) if spec.preprocess else None
    return [key for key in (file, _code_key(spec)) if key]


def _code_key(spec: PipelineSpec) -> str | None:
    if not spec.trust_remote_code:
        return None
    local = spec.local_path(spec.model)
    return f"model code {local.resolve() if local is not None else spec.model}"


def model_code_pinned(spec: PipelineSpec) -> bool:
    """True when this process agreed to run exactly the spec's model code (see `consent`): the
    load then reads only what was digested (the cache), never a newer revision from the Hub."""
    key = _code_key(spec)
    return bool(key and _AGREED.get(key))


def agreed() -> tuple:
    """What this process agreed to, for the engine process that runs it (`agree`)."""
    return tuple(_AGREED.items())


def agree(pins: tuple) -> None:
    """Take the window's agreements (`agreed`) as this process's own: the engine runs exactly
    the code the user said yes to there (none: forget every agreement, as for another engine)."""
    _AGREED.clear()
    _AGREED.update(pins)


# Preprocess file or script -> SHA-256 of the content consent let run ("": none yet): a file swapped
# between the question and the import (the model loads in between) is refused, never run.
# "model code FOLDER" -> `model_code_digest` agreed to, the same way for a model's own code.
_AGREED: dict[str, str] = {}


def _question(path: str | Path, spec: PipelineSpec, preprocess: str | None, code: str) -> str:
    """What would run, with the SHA-256 of what was read (the user can check it where the code
    is: `sha256sum pre.py`)."""
    what = []
    if spec.preprocess:
        file, _, function = spec.preprocess.rpartition(":")
        what.append(f"the Python function {function!r} from {spec.resolve_path(file)}"
                    f" (SHA-256 {_short(preprocess)})")
    if spec.trust_remote_code:
        where = " and ".join(source.words() for source in model_code_sources(spec))
        what.append(f"the model's own code (trust_remote_code) from {where} "
                    f"(digest {_short(code)})")
    return f"{Path(path).name} runs {' and '.join(what)}"


def _short(digest: str) -> str:
    return f"{digest[:16]}…"


def _preprocess_path(spec: PipelineSpec) -> Path:
    return spec.resolve_path(spec.preprocess.rpartition(":")[0])


def trust(path: str | Path, spec: PipelineSpec) -> bool:
    """Remember that the user agreed to run this content; False when nothing was recorded (no
    code to trust, a preprocess file that is not there, a config folder that cannot be written:
    the consent still holds for this run, it is just asked for again next time)."""
    if not runs_code(spec):
        return False
    try:
        key = digest(path, spec)
    except InputError:
        return False
    return _record(key)


def digest(path: str | Path, spec: PipelineSpec) -> str:
    """SHA-256 of the spec/session file's bytes, its preprocess file's bytes, and with
    trust_remote_code a local model folder's .py files (names and bytes)."""
    return read_code(path, spec).key


@dataclass(frozen=True)
class CodeToRun(Document):
    """What a run would execute, read once where it would run (the engine's machine: a box's
    files are read on the box): the trust store's digest of it, the question for the user with
    the digests of what was read, and the pins the engine then runs exactly (file or model code
    -> its digest, `agree`)."""

    key: str
    question: str
    pins: dict[str, str] = field(default_factory=dict)


def read_code(path: str | Path, spec: PipelineSpec) -> CodeToRun:
    """The code `spec`, read from the file `path`, runs: each file read once."""
    hasher = hashlib.sha256(b"fp16studio-trust-1\0")
    hasher.update(read_bytes(Path(path), "spec"))
    pins, preprocess = {}, None
    if spec.preprocess:
        source = read_bytes(_preprocess_path(spec), "preprocess")
        hasher.update(b"\0")
        hasher.update(source)
        preprocess = hashlib.sha256(source).hexdigest()
        pins[str(_preprocess_path(spec).resolve())] = preprocess
    code = model_code_digest(spec)
    if code:
        hasher.update(b"\0" + code.encode())
        pins[_code_key(spec)] = code
    return CodeToRun(hasher.hexdigest(), _question(path, spec, preprocess, code), pins)


def read_script(path: Path) -> CodeToRun:
    """A script to be traced, read once: its SHA-256 (the trust store's key too) and pin."""
    content = hashlib.sha256(read_bytes(path, "script")).hexdigest()
    return CodeToRun(hashlib.sha256(b"fp16studio-trust-script\0" + content.encode()).hexdigest(),
                     f"the script {path} (SHA-256 {_short(content)})",
                     {str(path.resolve()): content})


def model_code_digest(spec: PipelineSpec) -> str:
    """SHA-256 of every code file loading the spec's model with trust_remote_code would import
    (`model_code_sources`: a Hub repository's name and resolved revision, each file's name and
    bytes); "" without trust_remote_code."""
    if not spec.trust_remote_code:
        return ""
    hasher = hashlib.sha256()
    for source in model_code_sources(spec):
        hasher.update(b"\0" + source.words().encode() + b"\0")
        for code in source.files():
            hasher.update(b"\0" + code.name.encode() + b"\0")
            hasher.update(read_bytes(code, "model code"))
    return hasher.hexdigest()


@dataclass(frozen=True)
class CodeSource:
    """Where code a trust_remote_code load imports lives: a local folder, or a Hub repository's
    snapshot in the Hugging Face cache at the commit its revision resolves to now (a moved
    revision is another source, so another digest and a new question)."""
    folder: Path
    repo: str | None = None
    revision: str | None = None

    def words(self) -> str:
        return str(self.folder) if self.repo is None else \
            f"the Hub repository {self.repo!r} at revision {self.revision}"

    def files(self) -> list[Path]:
        return sorted(self.folder.glob("*.py"))


def model_code_sources(spec: PipelineSpec) -> list[CodeSource]:
    """Every source of code a trust_remote_code load of the spec's model can import: the model
    itself (a local folder, or a Hub repository) and each place its configs' `auto_map` names
    (`repo--module.Class`: a folder relative to the working folder, as transformers reads it,
    else a Hub repository at its "main", transformers' default for another repository's code).
    Found by reading the configs, never by running anything. A Hub repository that is not in
    the cache cannot be read before the question, so it is refused (InputError) until fetched."""
    if not spec.trust_remote_code:
        return []
    local = spec.local_path(spec.model)
    if local is None:
        model = _hub_source(spec.model, spec.revision)
    elif local.is_dir():
        model = CodeSource(local.resolve())
    else:
        return []
    sources = {model: None}
    for reference in _auto_map_references(model.folder):
        folder = expand_user(reference)
        if folder.is_dir():
            sources[CodeSource(folder.resolve())] = None
        elif looks_like_repo_id(reference):
            sources[_hub_source(reference, None)] = None
    return list(sources)


def _hub_source(repo: str, revision: str | None) -> CodeSource:
    snapshot = cached_snapshot(repo, "model", revision) if looks_like_repo_id(repo) else None
    if snapshot is None:
        raise InputError(f"model code (trust_remote_code) from the Hub repository {repo!r} is not in "
                         "the Hugging Face cache, so it cannot be read before you agree to run it; "
                         f"fetch it first (hf download {repo}), then run again")
    return CodeSource(Path(snapshot).resolve(), repo, Path(snapshot).name)


# The files whose `auto_map` says where a model's, tokenizer's or processor's code lives.
_AUTO_MAP_FILES = ("config.json", "tokenizer_config.json", "preprocessor_config.json",
                   "processor_config.json")


def _auto_map_references(folder: Path):
    """The `repo` of each `repo--module.Class` reference in `folder`'s configs."""
    for name in _AUTO_MAP_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            settings = json.loads(read_bytes(path, "model config"))
        except (InputError, ValueError, RecursionError):
            continue   # an unreadable config is refused when the model loads, and runs nothing
        auto_map = settings.get("auto_map") if isinstance(settings, dict) else None
        # {"AutoModel": "repo--module.Class", "AutoTokenizer": [slow, fast]}, or an old
        # tokenizer's bare [slow, fast].
        references = list(auto_map.values()) if isinstance(auto_map, dict) else \
            auto_map if isinstance(auto_map, list) else []
        for reference in references:
            for text in reference if isinstance(reference, list) else [reference]:
                if isinstance(text, str) and "--" in text:
                    yield text.split("--")[0]


def _record(key: str) -> bool:
    return update_config_list(STORE, lambda entries: ([e for e in entries if e != key] + [key])[-STORE_LIMIT:])


def _read_store() -> list[str]:
    # No store yet, or a damaged one: nothing is trusted, the user is asked again.
    return [entry for entry in config_list(STORE) if isinstance(entry, str)]
