"""Patch application as kube-apiserver does it, for the fakes.

The agent only *builds* patches (small dicts); this module *applies* them, so the
in-memory :mod:`tests.doubles.kube` and the HTTP fake in tests can hold the agent to
the real server's semantics. The one that matters most:

* a **strategic merge patch** merges lists that declare a ``patchMergeKey`` element by
  element (``status.conditions`` by ``type``), so a patch carrying only the agent's own
  condition types leaves ``Ready`` and the kubelet's conditions alone; lists without a
  merge key (``spec.taints``) are **replaced** whole, which is why taint patches must carry
  the complete list and a resourceVersion precondition;
* ``$patch: delete`` removes a merged list element (or a map), ``$patch: replace``
  replaces instead of merging, ``$retainKeys`` prunes a map, ``$setElementOrder/...``
  only orders and is ignored here, ``null`` deletes a key;
* a **JSON merge patch** (RFC 7386) merges maps and replaces every list.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

JSON = Any

MERGE_KEYS: Mapping[str, Mapping[tuple[str, ...], str]] = {
    "nodes": {
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
        ("status", "volumesAttached"): "name",
        ("metadata", "ownerReferences"): "uid",
    },
    "pods": {
        ("status", "conditions"): "type",
        ("metadata", "ownerReferences"): "uid",
        ("spec", "containers"): "name",
        ("spec", "initContainers"): "name",
        ("spec", "volumes"): "name",
        ("spec", "tolerations"): "",  # atomic in the API; listed so nothing merges by accident
    },
    "resourceclaims": {
        ("status", "reservedFor"): "uid",
        ("metadata", "ownerReferences"): "uid",
    },
}
"""``patchMergeKey`` of the list fields of each kind that the agent or its tests patch.
An empty key means "replace", as for any list not listed."""

PRIMITIVE_MERGE_LISTS: Mapping[str, frozenset[tuple[str, ...]]] = {
    "nodes": frozenset({("metadata", "finalizers")}),
    "pods": frozenset({("metadata", "finalizers")}),
}
"""Lists of scalars with ``patchStrategy: merge``: patch values are added (set union)."""


class PatchError(ValueError):
    """A patch the API server would refuse (422)."""


def json_merge_patch(target: JSON, patch: JSON) -> JSON:
    """RFC 7386: a new document; ``target`` is not modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(kind: str, target: JSON, patch: JSON) -> JSON:
    """Apply a strategic merge patch to an object of ``kind`` (``nodes``, ``pods``...)."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    merged = _merge_map(kind, (), copy.deepcopy(target) if isinstance(target, dict) else {}, patch)
    return merged if merged is not None else {}


def _merge_map(
    kind: str, path: tuple[str, ...], target: dict[str, Any], patch: Mapping[str, Any]
) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if directive is not None:
        raise PatchError(f"unknown $patch directive {directive!r} at {'.'.join(path) or '/'}")
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys",):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(target.get(field), list) and isinstance(value, list):
                target[field] = [item for item in target[field] if item not in value]
            continue
        if key.startswith("$"):
            raise PatchError(f"unknown directive {key!r} at {'.'.join(path) or '/'}")
        child = (*path, key)
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            existing = target.get(key)
            merged = _merge_map(kind, child, existing if isinstance(existing, dict) else {}, value)
            if merged is None:
                target.pop(key, None)
            else:
                target[key] = merged
        elif isinstance(value, list):
            target[key] = _merge_list(kind, child, target.get(key), value)
        else:
            target[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        for key in [k for k in target if k not in retain]:
            del target[key]
    return target


def _merge_list(kind: str, path: tuple[str, ...], target: Any, patch: list[Any]) -> list[Any]:
    merge_key = MERGE_KEYS.get(kind, {}).get(path, "")
    current = copy.deepcopy(target) if isinstance(target, list) else []
    if path in PRIMITIVE_MERGE_LISTS.get(kind, frozenset()):
        return current + [item for item in patch if item not in current]
    if not merge_key:
        return [copy.deepcopy(item) for item in patch]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [
            copy.deepcopy(item)
            for item in patch
            if not (isinstance(item, dict) and item.get("$patch") == "replace")
        ]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(
                f"{'.'.join(path)}: every element must be an object with {merge_key!r}"
            )
        index = next(
            (
                i
                for i, existing in enumerate(current)
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del current[index]
            continue
        if index is None:
            current.append({k: copy.deepcopy(v) for k, v in item.items() if v is not None})
        else:
            merged = _merge_map(kind, path, current[index], item)
            if merged is not None:
                current[index] = merged
    return _server_order(current, target if isinstance(target, list) else [], patch, merge_key)


def _server_order(
    merged: list[Any], original: list[Any], patch: list[Any], merge_key: str
) -> list[Any]:
    """kube-apiserver's order for a merged list: the patch's elements in patch order
    interleaved with the elements only the server had, in server order; an element both
    had goes by its server position, a new one before the next server-only one (so
    ``[Ready, MemoryPressure]`` patched with ``[DiskPressure, MemoryPressure]`` becomes
    ``[DiskPressure, Ready, MemoryPressure]``, as the real server answers)."""

    def key(item: Any) -> Any:
        return item.get(merge_key) if isinstance(item, dict) else None

    patch_order = [key(item) for item in patch if isinstance(item, dict)]
    server_order = [key(item) for item in original]
    from_patch = sorted(
        (item for item in merged if key(item) in patch_order),
        key=lambda item: patch_order.index(key(item)),
    )
    server_only = [item for item in merged if key(item) not in patch_order]
    ordered: list[Any] = []
    while server_only and from_patch:
        left, right = key(server_only[0]), key(from_patch[0])
        if right in server_order and server_order.index(left) < server_order.index(right):
            ordered.append(server_only.pop(0))
        else:
            ordered.append(from_patch.pop(0))
    return ordered + server_only + from_patch
