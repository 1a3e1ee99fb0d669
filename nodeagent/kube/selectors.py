"""Label and field selectors, parsed once and matched against plain objects.

The agent uses label selectors for ``protectedLabels`` (pods an operator never wants
evicted) and both kinds in the in-memory fake API server, which must filter lists and
watches exactly as kube-apiserver does for the requests the agent sends.

Grammar (the subset kube-apiserver accepts and the agent needs):

* label selector: comma-separated requirements, all of which must hold:
  ``key=value``, ``key==value``, ``key!=value``, ``key`` (exists), ``!key`` (absent),
  ``key in (a,b)``, ``key notin (a,b)``;
* field selector: comma-separated ``path=value``, ``path==value`` or ``path!=value`` on
  dotted paths (``spec.nodeName``, ``status.phase``, ``metadata.name``). A missing field
  compares as the empty string, as in the API server.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class SelectorError(ValueError):
    """A selector string that cannot be parsed; the message quotes the offending part."""


class Operator(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        match self.operator:
            case Operator.EXISTS:
                return present
            case Operator.DOES_NOT_EXIST:
                return not present
            case Operator.EQUALS | Operator.IN:
                return present and labels[self.key] in self.values
            case Operator.NOT_EQUALS | Operator.NOT_IN:
                return not present or labels[self.key] not in self.values
        return False  # pragma: no cover - exhaustive match


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """All requirements must hold; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(requirement.matches(labels) for requirement in self.requirements)

    def __str__(self) -> str:
        parts = []
        for r in self.requirements:
            values = ",".join(sorted(r.values))
            if r.operator is Operator.EXISTS:
                parts.append(r.key)
            elif r.operator is Operator.DOES_NOT_EXIST:
                parts.append(f"!{r.key}")
            elif r.operator in (Operator.IN, Operator.NOT_IN):
                parts.append(f"{r.key} {r.operator.value} ({values})")
            else:
                parts.append(f"{r.key}{r.operator.value}{values}")
        return ",".join(parts)


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a label selector string; raise :class:`SelectorError` naming the bad part."""
    requirements = []
    for part in _split_top_level(text):
        if match := _SET_RE.match(part):
            values = frozenset(v.strip() for v in match.group(4).split(",") if v.strip())
            operator = Operator.IN if match.group(3) == "in" else Operator.NOT_IN
            requirements.append(Requirement(match.group(1), operator, values))
        elif match := _EQ_RE.match(part):
            operator = Operator.NOT_EQUALS if match.group(3) == "!=" else Operator.EQUALS
            requirements.append(Requirement(match.group(1), operator, frozenset({match.group(4)})))
        elif match := _EXISTS_RE.match(part):
            operator = Operator.DOES_NOT_EXIST if match.group(1) else Operator.EXISTS
            requirements.append(Requirement(match.group(2), operator))
        else:
            raise SelectorError(f"invalid label selector requirement {part.strip()!r} in {text!r}")
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    path: tuple[str, ...]
    negated: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negated


@dataclass(frozen=True, slots=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(requirement.matches(obj) for requirement in self.requirements)


def field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    """The field at ``path`` as the API server compares it: missing is ``""``."""
    current: Any = obj
    for part in path:
        if not isinstance(current, Mapping) or part not in current:
            return ""
        current = current[part]
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for char in text:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def parse_field_selector(text: str) -> FieldSelector:
    """Parse a field selector; raise :class:`SelectorError` naming the bad part."""
    requirements = []
    for part in _split_unescaped(text, ","):
        if not part.strip():
            continue
        for token, negated in (("!=", True), ("==", False), ("=", False)):
            if token in part:
                path, _, value = part.partition(token)
                path = path.strip()
                if not path or not re.fullmatch(r"[A-Za-z0-9_.]+", path):
                    raise SelectorError(f"invalid field selector {part!r} in {text!r}")
                requirements.append(FieldRequirement(tuple(path.split(".")), negated, value))
                break
        else:
            raise SelectorError(f"invalid field selector {part!r}: expected path=value")
    return FieldSelector(tuple(requirements))


def matcher(
    *, field_selector: str = "", label_selector: str = ""
) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over API objects combining both selectors."""
    fields = parse_field_selector(field_selector)
    labels = parse_label_selector(label_selector)

    def matches(obj: Mapping[str, Any]) -> bool:
        object_labels = (obj.get("metadata") or {}).get("labels") or {}
        return fields.matches(obj) and labels.matches(object_labels)

    return matches
