"""Reading and writing resource documents as YAML or JSON, with positions for errors.

ruamel.yaml's round-trip loader remembers where every key sits, so a validation error
from pydantic can name the file, the line and the field. Remembering costs: it reads some
300 documents a second, where the safe loader (C, ruamel.yaml.clib) reads thousands. So
`job apply -f` reads with the safe loader (`positions=False`) and reads a text again
with positions only when one of its documents fails: the error names the same file,
line and field (docs/performance.md). The seed's `projects.yaml`
form (`projects: {NAME: {...}}`) is expanded here into Project documents, so every
place that takes a Project takes that form too.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.resolver import VersionedResolver

from jobd.api.arrays import JobArray
from jobd.api.models import ADMISSION, API_VERSION, Job, Project, Resource, Worker

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "Document",
    "ManifestError",
    "dump_yaml",
    "load_documents",
    "load_path",
    "parse_resource",
]

_KINDS: dict[str, type[BaseModel]] = {
    "Job": Job,
    "JobArray": JobArray,
    "Project": Project,
    "Worker": Worker,
}
_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

# Limits on what a manifest may make its reader do (docs/cli.md): a file of 10,000 jobs
# is a few MB, nests a handful of levels and uses aliases, if at all, a few times.
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIAS_NODES = 100_000  # nodes that aliases add when expanded, over a whole text


class ManifestError(ValueError):
    """A document that cannot become a resource; the message names where and why."""


@dataclass
class Document:
    """One raw document and where it came from."""

    data: Any
    source: str
    line: int  # 1-based line of the document's start (1 when read without positions)
    # Read without positions: the whole text and this document's place among the text's
    # documents, so that an error can read it again, with them, to say where.
    text: str | None = None
    index: int = 0


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    return yaml


class _Yaml12Resolver(VersionedResolver):
    """ruamel.yaml's resolver, for YAML 1.2 only: the stock one looks the version up for
    every scalar, through a failing attribute look-up under the C parser, which costs a
    fifth of the safe loader's time. (A text that asks for another version with a %YAML
    directive is read by the round-trip loader.)"""

    @property
    def processing_version(self) -> Any:
        return (1, 2)


def _fast_yaml() -> YAML:
    """The safe loader: plain dicts and lists, YAML 1.2 as the round-trip loader reads it,
    in C when ruamel.yaml.clib is installed (a dependency of jobd's)."""
    yaml = YAML(typ="safe")
    yaml.Resolver = _Yaml12Resolver
    yaml.allow_duplicate_keys = False
    return yaml


def load_documents(text: str, source: str = "<stdin>", *, positions: bool = True) -> list[Document]:
    """Every document in a YAML (multi-document) or JSON text; lists are flattened.

    A text that would make the reader expand aliases past MAX_ALIAS_NODES, nest past
    MAX_DEPTH or read past MAX_MANIFEST_BYTES is refused with where and why, before it
    is built: a few hundred bytes of aliases can expand to gigabytes ("billion laughs").
    `positions=False` reads fast, without positions; `parse_resource` reads the text
    again with them when one of its documents fails.
    """
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(
            f"{source}: {len(text):,} bytes is over the {MAX_MANIFEST_BYTES:,} a manifest may hold"
        )
    if not positions and "%YAML" not in text:
        fast = _load_fast(text, source)
        if fast is not None:
            return fast
    try:
        _check_limits(text, source)
        raw = [d for d in _yaml().load_all(text) if d is not None]
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ManifestError(f"{where}: not valid YAML or JSON: {exc.problem}") from None
    except RecursionError:
        # The composer recurses once per level; the event scan does not, and says where.
        _check_shape(text, source)
        raise ManifestError(f"{source}: nested too deep to read") from None
    return _documents(raw, source)


def _documents(raw: list[Any], source: str) -> list[Document]:
    docs: list[Document] = []
    for item in raw:
        for data in _flatten(item):
            docs.extend(_expand_projects_form(data, source))
    return docs


def _check_limits(text: str, source: str) -> None:
    """Refuse, before building anything, a text nesting or expanding past the limits."""
    deep_at = _too_deep_at(text)
    if deep_at is not None:
        _check_shape_of_head(text, deep_at, source)
    if "&" in text or "*" in text or deep_at is not None:
        _check_shape(text, source)  # aliases (or their characters), or deep brackets


def _load_fast(text: str, source: str) -> list[Document] | None:
    """The documents read without positions, each able to be read again with them; None
    for a text the safe loader does not read (bad YAML, tags, deep nesting...): the
    round-trip loader then reads it, or refuses it naming the line, as it always has."""
    try:
        _check_limits(text, source)
        raw = [d for d in _fast_yaml().load_all(text) if d is not None]
        docs = _documents(raw, source)
    except (MarkedYAMLError, ManifestError, RecursionError):
        return None
    for index, doc in enumerate(docs):
        doc.text, doc.index = text, index
    return docs


def _too_deep_at(text: str) -> int | None:
    """Where brackets first nest past MAX_DEPTH, quotes ignored, else None: a cheap bound
    that says whether the exact check is needed (ruamel.yaml spends seconds on 10,000
    brackets before it fails)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return None
    depth = 0
    for match in _BRACKETS.finditer(text):
        depth += 1 if match.group() in "[{" else -1
        if depth > MAX_DEPTH:
            return match.end()
    return None


def _check_shape_of_head(text: str, end: int, source: str) -> None:
    """The exact check on the text up to where brackets go too deep: a real nesting is
    refused after reading that much, not the whole text. (Brackets inside quotes may have
    misled the count: then the head ends unfinished and the whole text is checked.)"""
    with contextlib.suppress(MarkedYAMLError):
        _check_shape(text[:end], source)


_BRACKETS = re.compile(r"[\[\]{}]")


def _check_shape(text: str, source: str) -> None:
    """Refuse a text nesting past MAX_DEPTH or expanding aliases past MAX_ALIAS_NODES.

    Walks the parser's events, which come from a state machine, not recursion: the size
    of each anchored node is counted once as it closes, and each alias adds that size.
    """
    try:
        _check_events(_fast_yaml().parse(text), source)  # in C, when it can read the text
    except MarkedYAMLError:
        _check_events(_yaml().parse(text), source)  # says where, as it always has


def _check_events(events: Iterator[Any], source: str) -> None:
    open_sizes: list[list[Any]] = []  # [anchor, size] of each collection being read
    anchored: dict[str, int] = {}
    added = 0
    for event in events:
        name = type(event).__name__
        line = event.start_mark.line + 1
        if name in ("MappingStartEvent", "SequenceStartEvent"):
            open_sizes.append([event.anchor, 1])
            if len(open_sizes) > MAX_DEPTH:
                raise ManifestError(f"{source}:{line}: nested deeper than {MAX_DEPTH} levels")
            continue
        if name in ("MappingEndEvent", "SequenceEndEvent"):
            anchor, size = open_sizes.pop()
        elif name == "ScalarEvent":
            anchor, size = event.anchor, 1
        elif name == "AliasEvent":
            anchor, size = None, anchored.get(event.anchor, 1)
            added += size
            if added > MAX_ALIAS_NODES:
                raise ManifestError(
                    f"{source}:{line}: aliases expand past {MAX_ALIAS_NODES:,} nodes; "
                    "write the values out instead"
                )
        else:
            continue
        if anchor is not None:
            anchored[anchor] = size
        if open_sizes:
            open_sizes[-1][1] += size


def _flatten(item: Any) -> Iterator[Any]:
    if isinstance(item, list):
        for sub in item:
            yield from _flatten(sub)
    elif isinstance(item, dict) and item.get("kind") == "List" and "items" in item:
        yield from _flatten(item["items"])
    else:
        yield item


def _line_of(node: Any, default: int = 0) -> int:
    lc = getattr(node, "lc", None)
    return lc.line + 1 if lc is not None else default


def _expand_projects_form(data: Any, source: str) -> list[Document]:
    line = _line_of(data, 1)
    if not (isinstance(data, dict) and "projects" in data and "kind" not in data):
        return [Document(data, source, line)]
    projects = data["projects"]
    if not isinstance(projects, dict):
        raise ManifestError(f"{source}:{line}: projects: expected a mapping of name to settings")
    extra = sorted(set(data) - {"projects"})
    if extra:
        raise ManifestError(f"{source}:{line}: {extra[0]}: unknown field in a projects file")
    docs = []
    for name, settings in projects.items():
        spec = settings if settings is not None else {}
        doc = {"apiVersion": API_VERSION, "kind": "Project", "metadata": {"name": name}}
        doc["spec"] = spec
        docs.append(Document(doc, source, _line_of(projects, line)))
        docs[-1].data = _Positioned(doc, projects, name)
    return docs


class _Positioned(dict[str, Any]):
    """A synthesized Project whose spec positions point back into the projects file."""

    def __init__(self, doc: dict[str, Any], parent: Any, key: str) -> None:
        super().__init__(doc)
        self.parent, self.key = parent, key


def load_path(
    path: str | Path, note: Callable[[str], None] | None = None, *, positions: bool = True
) -> list[Document]:
    """Documents from a file, every manifest in a directory, or `-` for stdin.

    A directory is walked for `.yaml`, `.yml` and `.json` files, in sorted order, as a
    project's tree holds them: hidden directories and files (`.git`, `.venv`) are not
    entered, and a file none of whose documents is a jobd one (no `apiVersion: jobd/v1`,
    no kind of jobd's, no `projects:`) is left out; `note` is told of each with why. A
    file named on its own is always read, and what is wrong in it is an error.
    `positions`: as load_documents'.
    """
    import sys

    if str(path) == "-":
        # One byte past the limit is enough for load_documents to refuse it.
        text = sys.stdin.read(MAX_MANIFEST_BYTES + 1)
        return load_documents(text, "<stdin>", positions=positions)
    p = Path(path)
    if not p.is_dir():
        return load_documents(_read(p), str(path), positions=positions)
    tell = note or (lambda _text: None)
    docs: list[Document] = []
    for file in _manifest_files(p, tell):
        found = load_documents(_read(file), str(file), positions=positions)
        if found and not any(_is_jobd_document(d.data) for d in found):
            tell(f"skipped {file}: not a jobd manifest")
            continue
        docs.extend(found)
    return docs


def _manifest_files(root: Path, tell: Callable[[str], None]) -> list[Path]:
    files: list[Path] = []
    for top, dirs, names in os.walk(root):
        hidden = sorted(d for d in dirs if d.startswith("."))
        if hidden:
            shown = ", ".join(str(Path(top) / d) + "/" for d in hidden)
            tell(f"skipped {shown}: hidden")
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in sorted(n for n in names if n.endswith(_MANIFEST_SUFFIXES)):
            if name.startswith("."):
                tell(f"skipped {Path(top) / name}: hidden")
            else:
                files.append(Path(top) / name)
    return sorted(f for f in files if f.is_file())


def _is_jobd_document(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    return data.get("apiVersion") == API_VERSION or data.get("kind") in _KINDS


def _read(path: Path) -> str:
    """A manifest file's text, refused unread when it is over the limit."""
    try:
        with path.open(encoding="utf-8") as f:
            return f.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def parse_resource(doc: Document) -> Resource | JobArray:
    """Validate one document into its model; errors name file, line and field."""
    try:
        return _parse_resource(doc)
    except ManifestError:
        if doc.text is None:
            raise
    # Read without positions: read its text again, with them, to say where it is wrong.
    return _parse_resource(load_documents(doc.text, doc.source)[doc.index])


def _parse_resource(doc: Document) -> Resource | JobArray:
    data = doc.data
    if not isinstance(data, dict):
        raise ManifestError(f"{doc.source}:{doc.line}: a document must be a mapping")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ManifestError(
            f"{doc.source}:{_key_line(data, 'kind', doc.line)}: kind: "
            f"expected one of {', '.join(_KINDS)}, got {kind!r}"
        )
    if data.get("apiVersion") not in (API_VERSION, None):
        raise ManifestError(
            f"{doc.source}:{_key_line(data, 'apiVersion', doc.line)}: apiVersion: "
            f"expected {API_VERSION!r}, got {data.get('apiVersion')!r}"
        )
    plain = _plain(data)
    if kind == "Job" and isinstance(plain.get("spec"), dict) and "array" in plain["spec"]:
        kind, plain = "JobArray", {**plain, "kind": "JobArray"}  # a Job with `spec.array`
    try:
        return _KINDS[kind].model_validate(plain, context=ADMISSION)  # type: ignore[return-value]
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = [p for p in err["loc"] if not isinstance(p, str) or not p.startswith("function-")]
        line = _locate(data, loc, doc.line)
        field = ".".join(str(p) for p in loc) or "(document)"
        raise ManifestError(f"{doc.source}:{line}: {field}: {_reason(err)}") from None


def _reason(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def _plain(node: Any) -> Any:
    """ruamel's positioned maps and lists as plain ones; JSON's are plain already."""
    if type(node) is dict and not isinstance(node, _Positioned):
        return node  # parsed from JSON (the broker's case): nothing positioned inside
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [_plain(v) for v in node]
    return node


def _key_line(node: Any, key: Any, default: int) -> int:
    if isinstance(node, CommentedMap) and key in node:
        return int(node.lc.key(key)[0]) + 1
    if isinstance(node, CommentedSeq) and isinstance(key, int) and key < len(node):
        return int(node.lc.item(key)[0]) + 1
    return _line_of(node, default)


def _locate(data: Any, loc: Sequence[Any], default: int) -> int:
    """Deepest line the error path reaches in the positioned document."""
    if isinstance(data, _Positioned):
        if loc and loc[0] == "spec":
            return _locate(data.parent[data.key], loc[1:], _key_line(data.parent, data.key, 1))
        return _key_line(data.parent, data.key, default)
    line, node = default, data
    for part in loc:
        line = _key_line(node, part, line)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
    return line


def dump_yaml(docs: list[dict[str, Any]]) -> str:
    """Documents as multi-document YAML, keys in the order of the models."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    out = io.StringIO()
    yaml.dump_all([json.loads(json.dumps(d)) for d in docs], out)
    return out.getvalue()
