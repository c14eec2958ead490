"""The templates and `gen` entries of a version 1 reference set, expanded without running anything.

A v1 reference set may write its target URLs as templates (`"{{u}}/data.nc"`
with `"templates": {"u": "https://host/path"}`) and generate references
(`"gen": [{"key": "a/{{i}}", "url": "{{u}}", "offset": "{{i * 1000}}",
"length": "1000", "dimensions": {"i": {"stop": 5}}}]`). fsspec renders
them with jinja2, or, by default, with `str.format`, which lets a template
reach Python objects: `{{u.__globals__[os].environ}}` puts the daemon's
environment (its credentials) into a URL that is then fetched. The
document is data from whoever published it, so nothing in it is evaluated
as Python or as a jinja2 template here: an expression between `{{` and
`}}` may be a name (a template, or a `gen` dimension), an integer or
string literal, and `+ - * // %` on integers (`+` joins strings), in
parentheses. Anything else is refused with the expression named.

`gen` entries are expanded (fsspec ignores them unless told to render with
jinja2, which would make their chunks read as fill values): at most
`MAX_GENERATED` references in all, so a few bytes of document cannot ask
for unbounded memory.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

# References all `gen` entries of one reference set may make: ~250 bytes of memory each.
MAX_GENERATED = 100_000
# An expression longer than this is not a URL template (and parsing it costs time).
MAX_EXPRESSION = 200
_EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}

Value = int | str


class TemplateError(ValueError):
    """A template or `gen` entry that this module will not expand (the reference set does not open)."""


def expand_references(document: Mapping[str, Any]) -> dict[str, Any]:
    """The `refs` of a version 1 document with every template and `gen` entry expanded (fsspec's forms)."""
    templates = document.get("templates") or {}
    if not isinstance(templates, Mapping) or not all(isinstance(v, str) for v in templates.values()):
        raise TemplateError("reference set: `templates` must map names to strings")
    refs = document.get("refs") or {}
    if not isinstance(refs, Mapping):
        raise TemplateError("reference set: `refs` must be an object")
    out: dict[str, Any] = {}
    for key, value in refs.items():
        if isinstance(value, str):
            out[key] = value  # inline ('base64:...' is decoded where fsspec reads it)
        elif isinstance(value, dict):
            out[key] = json.dumps(value)
        elif isinstance(value, list) and value and isinstance(value[0], str) and "{{" in value[0]:
            out[key] = [render(value[0], templates, {}), *value[1:]]
        else:
            out[key] = value
    out.update(generated(document.get("gen") or [], templates))
    return out


def render(text: str, templates: Mapping[str, str], variables: Mapping[str, Value]) -> str:
    """`text` with each `{{expression}}` replaced by its value; a template's own `{{...}}` sees `variables`."""
    def value(match: re.Match[str]) -> str:
        return str(evaluate(match.group(1), templates, variables))

    return _EXPRESSION.sub(value, text)


def evaluate(expression: str, templates: Mapping[str, str], variables: Mapping[str, Value]) -> Value:
    """One `{{...}}` expression's value: names, literals, integer arithmetic, string joins; nothing else."""
    text = expression.strip()
    if len(text) > MAX_EXPRESSION:
        raise TemplateError(f"reference set: template expression longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(text, mode="eval")
        return _value(tree.body, templates, variables, text)
    except (SyntaxError, RecursionError, ZeroDivisionError, MemoryError) as exc:
        raise TemplateError(f"reference set: template expression {{{{{text}}}}}: {exc}") from None


def _value(node: ast.AST, templates: Mapping[str, str], variables: Mapping[str, Value], text: str) -> Value:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | str) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in variables:
            return variables[node.id]
        if node.id in templates:
            template = templates[node.id]
            # One level: a template's own expressions see the gen dimensions, never other templates.
            return render(template, {}, variables) if "{{" in template else template
        raise TemplateError(f"reference set: template expression {{{{{text}}}}} names {node.id!r}, "
                            "which is neither a template nor a dimension")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        operand = _value(node.operand, templates, variables, text)
        if isinstance(operand, int):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left = _value(node.left, templates, variables, text)
        right = _value(node.right, templates, variables, text)
        # Integers with any of the operators; strings only joined (`"a" * 10**9` would be memory).
        if (isinstance(left, int) and isinstance(right, int)) or \
                (isinstance(node.op, ast.Add) and isinstance(left, str) and isinstance(right, str)):
            return _OPERATORS[type(node.op)](left, right)  # type: ignore[no-any-return]
    raise TemplateError(f"reference set: template expression {{{{{text}}}}} is not supported: only names, "
                        "numbers, strings, + - * // % and parentheses are")


def generated(entries: Any, templates: Mapping[str, str]) -> Iterator[tuple[str, list[Any]]]:
    """The references `gen` entries make, as (key, [url] or [url, offset, length])."""
    if not isinstance(entries, list):
        raise TemplateError("reference set: `gen` must be a list")
    dimensions_of = [_dimensions(entry) for entry in entries]
    total = sum(math.prod(len(values) for values in dims.values()) for dims in dimensions_of)
    if total > MAX_GENERATED:
        raise TemplateError(f"reference set: its `gen` entries make {total} references, more than the "
                            f"{MAX_GENERATED} zarrfs expands")
    for entry, dimensions in zip(entries, dimensions_of, strict=True):
        has_offset, has_length = "offset" in entry, "length" in entry
        if has_offset != has_length:
            raise TemplateError("reference set: a `gen` entry needs both `offset` and `length`, or neither")
        names = list(dimensions)
        for values in itertools.product(*dimensions.values()):
            variables = dict(zip(names, values, strict=True))
            key = render(_text(entry, "key"), templates, variables)
            url = render(_text(entry, "url"), templates, variables)
            if has_offset:
                yield key, [url, _integer(entry, "offset", templates, variables),
                            _integer(entry, "length", templates, variables)]
            else:
                yield key, [url]


def _dimensions(entry: Any) -> dict[str, range | list[Value]]:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("dimensions"), Mapping):
        raise TemplateError("reference set: a `gen` entry needs `key`, `url` and `dimensions`")
    out: dict[str, range | list[Value]] = {}
    for name, spec in entry["dimensions"].items():
        if isinstance(spec, list) and all(isinstance(v, int | str) and not isinstance(v, bool) for v in spec):
            out[str(name)] = spec
        elif isinstance(spec, Mapping) and all(isinstance(spec.get(k, 0), int) for k in ("start", "stop", "step")) \
                and "stop" in spec and spec.get("step", 1) != 0:
            out[str(name)] = range(spec.get("start", 0), spec["stop"], spec.get("step", 1))
        else:
            raise TemplateError(f"reference set: `gen` dimension {name!r} must be a list of values or "
                                "{start, stop, step} integers")
    return out


def _text(entry: Mapping[str, Any], field: str) -> str:
    value = entry.get(field)
    if not isinstance(value, str):
        raise TemplateError(f"reference set: a `gen` entry's {field!r} must be a string")
    return value


def _integer(entry: Mapping[str, Any], field: str, templates: Mapping[str, str],
             variables: Mapping[str, Value]) -> int:
    value = entry[field]
    text = render(value, templates, variables) if isinstance(value, str) else value
    try:
        number = int(text)
    except (TypeError, ValueError):
        raise TemplateError(f"reference set: a `gen` entry's {field!r} is {text!r}, not an integer") from None
    if number < 0:
        raise TemplateError(f"reference set: a `gen` entry's {field!r} is negative ({number})")
    return number
