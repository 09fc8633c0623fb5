"""A small YAML reader for `--extra_llm_api_options` files (the emulator is stdlib-only).

`trtllm-serve` reads the file with `yaml.safe_load`. Options files are block mappings of
scalars (what Ansible's `to_nice_yaml` and hand-written examples produce), so this reader
covers block mappings and sequences, flow collections (`[1, 2]`, `{a: 1}`), comments, quoted
strings and PyYAML's YAML 1.1 scalar rules (`yes`/`on` are booleans, `1e-3` without a dot
is a string, `0x1f` an integer). Anything else (anchors, tags, block scalars, multiple
documents) fails with a labelled error instead of being misread.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

NULLS = ("", "~", "null", "Null", "NULL")
TRUES = ("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")
FALSES = ("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")
# PyYAML's resolver (YAML 1.1): a float needs a dot, an exponent needs a sign.
_INT = re.compile(r"[-+]?(0|[1-9][0-9_]*)")
_HEX = re.compile(r"[-+]?0x[0-9a-fA-F_]+")
_OCT = re.compile(r"[-+]?0[0-7_]+")
_FLOAT = re.compile(r"[-+]?([0-9][0-9_]*)?\.[0-9_]*([eE][-+][0-9]+)?")
_INF = re.compile(r"[-+]?\.(inf|Inf|INF)")
_NAN = re.compile(r"\.(nan|NaN|NAN)")


class YamlError(Exception):
    """The exception line `yaml.safe_load` (or the emulator's reader) ends with."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass(frozen=True)
class _Line:
    number: int
    indent: int
    text: str


def _scanner_error(problem: str, source: str, line: int, column: int) -> YamlError:
    return YamlError(f'yaml.scanner.ScannerError: {problem}\n  in "{source}", line {line}, column {column}')


def _unsupported(what: str, source: str, line: int) -> YamlError:
    return YamlError(
        f"NotImplementedError: specfleet TensorRT-LLM EMULATOR: {what} is not supported by the "
        f'emulator\'s YAML reader (in "{source}", line {line})'
    )


def _strip_comment(text: str) -> str:
    """Drop a `#` comment that starts the line or follows whitespace, outside quotes."""
    quote: str | None = None
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1] in " \t"):
            return text[:index].rstrip()
    return text.rstrip()


def _lines(text: str, source: str) -> list[_Line]:
    lines: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        body = _strip_comment(raw)
        if not body.strip():
            continue
        stripped = body.lstrip(" ")
        if stripped.startswith("\t"):
            raise _scanner_error(
                "while scanning for the next token\nfound character '\\t' that cannot start any token",
                source,
                number,
                len(body) - len(stripped) + 1,
            )
        if stripped in ("---", "..."):
            if lines:
                raise _unsupported("more than one document", source, number)
            continue
        lines.append(_Line(number, len(body) - len(stripped), stripped))
    return lines


def resolve_scalar(text: str) -> Any:
    """A plain scalar as PyYAML's SafeLoader types it."""
    value = text.strip()
    if value in NULLS:
        return None
    if value in TRUES:
        return True
    if value in FALSES:
        return False
    if _INT.fullmatch(value):
        return int(value.replace("_", ""))
    if _HEX.fullmatch(value):
        return int(value.replace("_", ""), 16)
    if _OCT.fullmatch(value):
        return int(value.replace("_", ""), 8)
    if _FLOAT.fullmatch(value) and any(c.isdigit() for c in value):
        return float(value.replace("_", ""))
    if _INF.fullmatch(value):
        return float("-inf") if value.startswith("-") else float("inf")
    if _NAN.fullmatch(value):
        return float("nan")
    return value


class _Flow:
    """Recursive descent over one flow collection or scalar (`[a, {b: 1}]`, `'x'`)."""

    def __init__(self, text: str, source: str, line: int) -> None:
        self.text = text
        self.pos = 0
        self.source = source
        self.line = line

    def error(self, problem: str) -> YamlError:
        return _scanner_error(problem, self.source, self.line, self.pos + 1)

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def parse(self) -> Any:
        value = self.value(top=True)
        self.skip_space()
        if self.pos != len(self.text):
            raise self.error("expected <block end>, but found unexpected content")
        return value

    def value(self, top: bool = False) -> Any:
        self.skip_space()
        if self.pos >= len(self.text):
            return None
        char = self.text[self.pos]
        if char == "[":
            return self.sequence()
        if char == "{":
            return self.mapping()
        if char in "'\"":
            return self.quoted()
        if char in "&*!|>%@`":
            raise _unsupported(f"the YAML indicator {char!r}", self.source, self.line)
        stops = "" if top else ",]}"
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in stops:
            if not top and self.text.startswith(": ", self.pos):
                break
            self.pos += 1
        return resolve_scalar(self.text[start : self.pos])

    def quoted(self) -> str:
        quote = self.text[self.pos]
        start = self.pos
        self.pos += 1
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if quote == "'" and char == "'":
                if self.text.startswith("''", self.pos):
                    self.pos += 2
                    continue
                self.pos += 1
                return self.text[start + 1 : self.pos - 1].replace("''", "'")
            if quote == '"' and char == "\\":
                self.pos += 2
                continue
            if quote == '"' and char == '"':
                self.pos += 1
                try:
                    return str(json.loads(self.text[start : self.pos]))
                except ValueError as exc:
                    raise self.error("found unknown escape character") from exc
            self.pos += 1
        raise self.error("while scanning a quoted scalar\nfound unexpected end of stream")

    def sequence(self) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        while True:
            self.skip_space()
            if self.text.startswith("]", self.pos):
                self.pos += 1
                return items
            items.append(self.value())
            self.skip_space()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif not self.text.startswith("]", self.pos):
                raise self.error("while parsing a flow sequence\nexpected ',' or ']'")

    def mapping(self) -> dict[Any, Any]:
        self.pos += 1
        items: dict[Any, Any] = {}
        while True:
            self.skip_space()
            if self.text.startswith("}", self.pos):
                self.pos += 1
                return items
            key = self.value()
            self.skip_space()
            if self.text.startswith(":", self.pos):
                self.pos += 1
                items[key] = self.value()
            else:
                items[key] = None
            self.skip_space()
            if self.text.startswith(",", self.pos):
                self.pos += 1
            elif not self.text.startswith("}", self.pos):
                raise self.error("while parsing a flow mapping\nexpected ',' or '}'")


def _is_item(text: str) -> bool:
    """A block sequence entry: `-` alone or followed by a space."""
    return text == "-" or text.startswith("- ")


def _split_key(line: _Line, source: str) -> tuple[Any, str] | None:
    """`key: rest` -> (key, rest); None when the line holds no mapping key."""
    text = line.text
    if text[0] in "'\"":
        flow = _Flow(text, source, line.number)
        key = flow.quoted()
        rest = text[flow.pos :]
        if rest.startswith(":") and (len(rest) == 1 or rest[1] == " "):
            return key, rest[1:].strip()
        return None
    match = re.search(r":(\s|$)", text)
    if match is None or text[0] in "[{":
        return None
    return resolve_scalar(text[: match.start()]), text[match.end() :].strip()


class _Block:
    def __init__(self, lines: list[_Line], source: str) -> None:
        self.lines = lines
        self.index = 0
        self.source = source

    def inline(self, text: str, line: _Line) -> Any:
        if text.startswith(("|", ">")):
            raise _unsupported("a block scalar (| or >)", self.source, line.number)
        return _Flow(text, self.source, line.number).parse()

    def node(self, indent: int) -> Any:
        """The block node whose lines start at column ``indent``."""
        line = self.lines[self.index]
        if _is_item(line.text):
            return self.sequence(indent)
        if _split_key(line, self.source) is None:
            self.index += 1
            value = self.inline(line.text, line)
            if self.index < len(self.lines) and self.lines[self.index].indent >= indent:
                nxt = self.lines[self.index]
                raise _scanner_error("mapping values are not allowed here", self.source, nxt.number, nxt.indent + 1)
            return value
        return self.mapping(indent)

    def child(self, parent: _Line, allow_same_indent_sequence: bool) -> Any:
        """The value of `key:` or `-` with nothing after it: the indented block below, or null."""
        if self.index >= len(self.lines):
            return None
        nxt = self.lines[self.index]
        if nxt.indent > parent.indent:
            return self.node(nxt.indent)
        if allow_same_indent_sequence and nxt.indent == parent.indent and _is_item(nxt.text):
            return self.sequence(nxt.indent)
        return None

    def mapping(self, indent: int) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        while self.index < len(self.lines):
            line = self.lines[self.index]
            if line.indent < indent:
                break
            if line.indent > indent:
                raise _scanner_error("mapping values are not allowed here", self.source, line.number, line.indent + 1)
            split = _split_key(line, self.source)
            if split is None:
                raise _scanner_error(
                    "while scanning a simple key\ncould not find expected ':'", self.source, line.number, 1
                )
            key, rest = split
            self.index += 1
            # PyYAML keeps the last of duplicate keys.
            result[key] = self.inline(rest, line) if rest else self.child(line, allow_same_indent_sequence=True)
        return result

    def sequence(self, indent: int) -> list[Any]:
        result: list[Any] = []
        while self.index < len(self.lines):
            line = self.lines[self.index]
            if line.indent < indent or not _is_item(line.text):
                if line.indent > indent:
                    raise _scanner_error("expected <block end>, but found '?'", self.source, line.number, 1)
                break
            if line.indent > indent:
                raise _scanner_error("expected <block end>, but found '-'", self.source, line.number, line.indent + 1)
            item = line.text[1:].strip()
            self.index += 1
            if not item:
                result.append(self.child(line, allow_same_indent_sequence=False))
            elif _is_item(item):
                raise _unsupported("a nested sequence on one line", self.source, line.number)
            elif _split_key(_Line(line.number, 0, item), self.source) is not None:
                raise _unsupported("a mapping inside a block sequence", self.source, line.number)
            else:
                result.append(self.inline(item, line))
        return result


def load_yaml(text: str, source: str = "<unicode string>") -> Any:
    """`yaml.safe_load(text)` for the subset options files use; raises YamlError."""
    lines = _lines(text, source)
    if not lines:
        return None
    block = _Block(lines, source)
    value = block.node(lines[0].indent)
    if block.index < len(lines):
        line = lines[block.index]
        raise _scanner_error("expected '<document start>', but found '<block mapping start>'", source, line.number, 1)
    return value
