"""Field ownership (`metadata.managedFields`) and server-side apply, as Kubernetes does it.

Every write records which manager set which fields, as `FieldsV1` sets: `f:<name>` for a
field, `k:{"<key>":<value>}` for an item of a list keyed by its merge key, `v:<json>` for a
member of a set, `.` for a keyed item itself. The list semantics come from the kind's schema
(the built-in kinds' generated definitions, or a CRD's schema): `x-kubernetes-list-type`
`map`/`set`/`atomic`, with `x-kubernetes-patch-merge-key`/`x-kubernetes-list-map-keys`; lists
without them are atomic (owned as a whole).

* An update or patch (operation `Update`): the fields whose value it changed move to its
  manager (from other managers); fields it removed are dropped from every manager.
* An apply (operation `Apply`): the applier owns exactly the fields of its configuration.
  A field another manager owns with a different value is a conflict (409 naming each field
  and manager) unless `force=true`, which takes the field over. A field the applier owned
  before and no longer applies is removed from the object, unless another manager owns it.

Keyed list items are identified by the merge key alone (`k:{"port":80}` for a Service port),
so that an applied item matches the stored one whatever defaults the server added.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Any

import orjson

from gpushare.apiserver.errors import ApiError
from gpushare.apiserver.objects import same_json
from gpushare.apiserver.schema import schemas

Path = tuple[str, ...]
Leaves = dict[Path, Any]

_META_TRACKED = ("labels", "annotations", "finalizers", "ownerReferences")
_ITEM = "."


# -- field sets of objects ---------------------------------------------------------------------


def leaves(obj: dict[str, Any], schema: dict[str, Any] | None,
           subresource: str | None = None, skip: AbstractSet[str] = frozenset()) -> Leaves:
    """The owned paths of an object (or applied configuration), each with its value;
    without those under the fields named in `skip` (`spec`, `metadata.labels`)."""
    out: Leaves = {}
    root = schemas.resolve(schema)
    if subresource == "status":
        if "status" in obj and "status" not in skip:
            _walk(obj["status"], schemas.child(root, "status"), ("f:status",), out)
        return out
    m = obj.get("metadata")
    if isinstance(m, dict):
        meta_schema = schemas.child(root, "metadata")
        if meta_schema is None or "properties" not in meta_schema:
            meta_schema = schemas.resolve({"$ref": "io.k8s.apimachinery.pkg.apis.meta.v1."
                                                   "ObjectMeta"})
        for key in _META_TRACKED:
            if key in m and m[key] is not None and f"metadata.{key}" not in skip:
                _walk(m[key], schemas.child(meta_schema, key), ("f:metadata", f"f:{key}"), out)
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata", "status") or value is None or key in skip:
            continue
        _walk(value, schemas.child(root, key), (f"f:{key}",), out)
    return out


def _same_sections(old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    """The fields `leaves` starts from that are the same in both (by their encodings,
    so that no path under them can differ)."""
    out = {k for k, v in new.items() if k in old and same_json(v, old[k])}
    old_meta, new_meta = old.get("metadata"), new.get("metadata")
    if isinstance(old_meta, dict) and isinstance(new_meta, dict):
        out |= {f"metadata.{k}" for k in _META_TRACKED
                if same_json(old_meta.get(k), new_meta.get(k))}
    return out


def fields_tree(obj: dict[str, Any], schema: dict[str, Any] | None) -> dict[str, Any]:
    """`to_fields_v1(leaves(obj, schema))` in one walk (the create path)."""
    root = _node(schemas.resolve(schema))
    tree: dict[str, Any] = {}
    m = obj.get("metadata")
    if isinstance(m, dict):
        meta_schema = schemas.child(root.schema, "metadata")
        if meta_schema is None or "properties" not in meta_schema:
            meta_schema = schemas.resolve({"$ref": "io.k8s.apimachinery.pkg.apis.meta.v1."
                                                   "ObjectMeta"})
        meta_node = _node(meta_schema)
        meta_tree = {}
        for k in _META_TRACKED:
            if m.get(k) is not None:
                key, child = meta_node.kid(k)
                meta_tree[key] = _tree(m[k], child)
        if meta_tree:
            tree["f:metadata"] = meta_tree
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata", "status") or value is None:
            continue
        name, child = root.kid(key)
        tree[name] = _tree(value, child)
    return tree


class _Node:
    """What `fields_tree` needs of one (resolved) schema node, worked out once: whether an
    object there is owned as a whole, how a list there is owned, and each field's FieldsV1
    key and schema node."""

    __slots__ = ("_items", "atomic", "kids", "list_key", "list_kind", "schema")

    def __init__(self, schema: dict[str, Any] | None) -> None:
        self.schema = schema
        self.atomic = schema is not None and (
            schema.get("x-kubernetes-map-type") == "atomic"
            or schema.get("type") not in (None, "object"))
        self.list_kind, self.list_key = _list_kind(schema)
        self.kids: dict[str, tuple[str, _Node]] = {}
        self._items: _Node | None = None

    def kid(self, key: str) -> tuple[str, _Node]:
        entry = self.kids.get(key)
        if entry is None:
            entry = self.kids[key] = (f"f:{key}", _node(schemas.child(self.schema, key)))
        return entry

    def items(self) -> _Node:
        if self._items is None:
            self._items = _node(schemas.resolve(schemas.items(self.schema)))
        return self._items


_NODES: dict[int, _Node] = {}
_NODES_MAX = 100_000


def _node(schema: dict[str, Any] | None) -> _Node:
    """The node of a resolved schema, memoized (it keeps `schema` alive, so the id is not
    reused while cached)."""
    if schema is None:
        return _NO_SCHEMA
    found = _NODES.get(id(schema))
    if found is not None and found.schema is schema:
        return found
    made = _Node(schema)
    if len(_NODES) < _NODES_MAX:
        _NODES[id(schema)] = made
    return made


def _object(value: dict[str, Any], node: _Node) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kids = node.kids
    for k, v in value.items():
        if v is None:
            continue
        entry = kids.get(k) or node.kid(k)
        out[entry[0]] = _tree(v, entry[1]) if isinstance(v, dict | list) else {}
    return out


def _tree(value: Any, node: _Node) -> dict[str, Any]:
    if isinstance(value, dict):
        if not value or node.atomic:
            return {}
        return _object(value, node)
    if isinstance(value, list) and value:
        kind, key = node.list_kind, node.list_key
        if kind == "map" and key and all(isinstance(i, dict) for i in value):
            item_node = node.items()
            out: dict[str, Any] = {}
            for item in value:
                entry = _object(item, item_node)
                out[item_key(item, key)] = {_ITEM: {}, **entry}
            return out
        if kind == "set" and all(not isinstance(v, dict | list) for v in value):
            return {"v:" + orjson.dumps(v).decode(): {} for v in value}
    return {}


def _list_kind(schema: dict[str, Any] | None) -> tuple[str, str | None]:
    if schema is None:
        return "atomic", None
    merge_key = schema.get("x-kubernetes-patch-merge-key")
    list_type = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys") or []
    strategy = str(schema.get("x-kubernetes-patch-strategy") or "")
    if list_type == "map" or (list_type is None and merge_key and "merge" in strategy):
        return "map", merge_key or (keys[0] if keys else None)
    if list_type == "set" or (list_type is None and "merge" in strategy):
        return "set", None
    return "atomic", None


def item_key(item: dict[str, Any], key: str) -> str:
    return "k:" + orjson.dumps({key: item.get(key)}).decode()


def _walk(value: Any, schema: Any, path: Path, out: Leaves) -> None:
    """`schema` is resolved (no `$ref`) or None."""
    if isinstance(value, dict):
        atomic = schema is not None and schema.get("x-kubernetes-map-type") == "atomic"
        if atomic or not value or (schema is not None and schema.get("type") not in (
                None, "object")):
            out[path] = value
            return
        for k, v in value.items():
            if v is not None:
                _walk(v, schemas.child(schema, k), (*path, f"f:{k}"), out)
        return
    if isinstance(value, list):
        kind, key = _list_kind(schema)
        if kind == "map" and key and value and all(isinstance(i, dict) for i in value):
            item_schema = schemas.resolve(schemas.items(schema))
            for item in value:
                kp = (*path, item_key(item, key))
                out[(*kp, _ITEM)] = None
                for k, v in item.items():
                    if v is not None:
                        _walk(v, schemas.child(item_schema, k), (*kp, f"f:{k}"), out)
            return
        if kind == "set" and value and all(not isinstance(v, dict | list) for v in value):
            for v in value:
                out[(*path, "v:" + orjson.dumps(v).decode())] = v
            return
    out[path] = value


# -- FieldsV1 ----------------------------------------------------------------------------------


def to_fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for el in path:
            node = node.setdefault(el, {})
    return tree


def from_fields_v1(tree: Any) -> set[Path]:
    out: set[Path] = set()

    def walk(node: Any, path: Path) -> None:
        if not isinstance(node, dict) or not node:
            if path:
                out.add(path)
            return
        for k, v in node.items():
            walk(v, (*path, str(k)))
    walk(tree, ())
    return out


def field_path(path: Path) -> str:
    """A path as Kubernetes prints it in conflicts: `.spec.ports[port=80].targetPort`."""
    text = ""
    for el in path:
        if el.startswith("f:"):
            text += "." + el[2:]
        elif el.startswith("k:"):
            try:
                keys = json.loads(el[2:])
                text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
            except ValueError:
                text += f"[{el[2:]}]"
        elif el.startswith("v:"):
            text += f"[={el[2:]}]"
    return text


# -- entries -----------------------------------------------------------------------------------


class Entry:
    """One manager's fields. ``rendered`` is the entry as last rendered (or as stored, when
    parsed from a list this module rendered): reused while the entry is unchanged."""

    __slots__ = ("_rendered_from", "api_version", "fields", "manager", "operation",
                 "rendered", "subresource", "time")

    def __init__(self, manager: str, operation: str, api_version: str, time: str,
                 fields: AbstractSet[Path], subresource: str = "") -> None:
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.time = time
        self.fields = fields
        self.subresource = subresource
        self.rendered: dict[str, Any] | None = None
        self._rendered_from: tuple[Any, ...] = ()

    @classmethod
    def parse(cls, raw: Any) -> Entry | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("manager", ""), str):
            return None
        return cls(raw.get("manager", ""), str(raw.get("operation") or "Update"),
                   str(raw.get("apiVersion") or ""), str(raw.get("time") or ""),
                   from_fields_v1(raw.get("fieldsV1")), str(raw.get("subresource") or ""))

    def same(self, manager: str, operation: str, subresource: str) -> bool:
        return (self.manager, self.operation, self.subresource) == (manager, operation,
                                                                     subresource)

    def _signature(self) -> tuple[Any, ...]:
        return (self.fields, self.manager, self.operation, self.api_version, self.time,
                self.subresource)

    def render(self) -> dict[str, Any]:
        signature = self._signature()
        if self.rendered is not None and all(
                a is b for a, b in zip(signature, self._rendered_from, strict=True)):
            return self.rendered
        out: dict[str, Any] = {"manager": self.manager, "operation": self.operation,
                               "apiVersion": self.api_version, "time": self.time,
                               "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(self.fields)}
        if self.subresource:
            out["subresource"] = self.subresource
        # As parsing `out` back gives it: the paths that are no prefix of another.
        self.fields = _leaf_paths(self.fields)
        self.rendered, self._rendered_from = out, self._signature()
        return out

    def copy(self) -> Entry:
        out = Entry(self.manager, self.operation, self.api_version, self.time, self.fields,
                    self.subresource)
        out.rendered, out._rendered_from = self.rendered, self._rendered_from
        return out


def _leaf_paths(paths: AbstractSet[Path]) -> frozenset[Path]:
    prefixes = {p[:i] for p in paths for i in range(1, len(p))}
    return frozenset(paths - prefixes if not prefixes.isdisjoint(paths) else paths)


# Parsed entries of the managedFields lists rendered here (each stored object's list),
# by the list's identity (the list is kept alive, so its id is not reused while cached):
# the next write of that object reads them without parsing. Stored objects are never
# changed in place.
_PARSED: dict[int, tuple[list[dict[str, Any]], list[Entry]]] = {}
_PARSED_MAX = 4096
_PARSED_LOCK = threading.Lock()


def parse_entries(raw: Any) -> list[Entry]:
    if not isinstance(raw, list):
        return []
    found = _PARSED.get(id(raw))
    if found is not None and found[0] is raw:
        return [e.copy() for e in found[1]]
    return [e for e in (Entry.parse(r) for r in raw) if e is not None]


def render_entries(entries: list[Entry]) -> list[dict[str, Any]]:
    kept = [e for e in entries if e.fields]
    out = [e.render() for e in kept]
    with _PARSED_LOCK:
        if len(_PARSED) >= _PARSED_MAX:
            del _PARSED[next(iter(_PARSED))]
        _PARSED[id(out)] = (out, [e.copy() for e in kept])
    return out


# -- updates -----------------------------------------------------------------------------------


def track_update(old: dict[str, Any] | None, new: dict[str, Any], base: Any,
                 schema: dict[str, Any] | None, manager: str, api_version: str, now: str,
                 subresource: str | None) -> list[dict[str, Any]] | None:
    """The managedFields after an Update by `manager`; None when it changed no field."""
    sub = "status" if subresource == "status" else ""
    # Fields left as they were own nothing new and lose nothing: not walked.
    same = _same_sections(old, new) if old is not None else set()
    old_leaves = leaves(old, schema, subresource, same) if old is not None else {}
    new_leaves = leaves(new, schema, subresource, same)
    changed = {p for p, v in new_leaves.items() if p not in old_leaves or old_leaves[p] != v}
    removed = old_leaves.keys() - new_leaves.keys()
    if not changed and not removed:
        return None
    entries = parse_entries(base)
    taken = changed | removed
    for entry in entries:
        if entry.fields.isdisjoint(taken) and not (removed and any(
                _under_any(p, removed) for p in entry.fields)):
            continue  # unchanged: it keeps its rendering
        # Anything under a removed keyed item or map goes with it.
        entry.fields = {p for p in entry.fields - taken if not _under_any(p, removed)}
    mine = next((e for e in entries if e.same(manager, "Update", sub)), None)
    if mine is None:
        mine = Entry(manager, "Update", api_version, now, set(), sub)
        entries.append(mine)
    mine.fields = mine.fields | changed
    mine.time, mine.api_version = now, api_version
    return render_entries(entries)


def _under_any(path: Path, prefixes: set[Path]) -> bool:
    return any(path[:i] in prefixes or (*path[:i], _ITEM) in prefixes
               for i in range(1, len(path)))


# -- apply -------------------------------------------------------------------------------------


def conflicts_error(group: str, resource: str, name: str,
                    found: list[tuple[Path, Entry]]) -> ApiError:
    by_manager: dict[str, list[str]] = {}
    causes = []
    for path, entry in found:
        text = field_path(path)
        who = f'"{entry.manager}"' + (f" using {entry.api_version}" if entry.api_version else "")
        by_manager.setdefault(who, []).append(text)
        causes.append({"reason": "FieldManagerConflict", "message": f"conflict with {who}",
                       "field": text})
    n = len(found)
    parts = []
    for who, fields in by_manager.items():
        if len(fields) == 1:
            parts.append(f"conflict with {who}: {fields[0]}")
        else:
            parts.append(f"conflicts with {who}:\n" + "\n".join(f"- {f}" for f in fields))
    message = f"Apply failed with {n} conflict{'s' if n != 1 else ''}: " + "\n".join(parts)
    details: dict[str, Any] = {"name": name, "kind": resource, "causes": causes}
    if group:
        details["group"] = group
    return ApiError(409, message, "Conflict", details)


def apply(live: dict[str, Any], config: dict[str, Any], schema: dict[str, Any] | None,
          manager: str, api_version: str, now: str, force: bool, subresource: str | None,
          merge: Any, error_for: tuple[str, str, str]) -> dict[str, Any]:
    """The object after `manager` applies `config` to `live` (managedFields set)."""
    sub = "status" if subresource == "status" else ""
    entries = parse_entries(live["metadata"].get("managedFields"))
    applied = leaves(config, schema, subresource)
    live_leaves = leaves(live, schema, subresource)
    mine = next((e for e in entries if e.same(manager, "Apply", sub)), None)
    others = [e for e in entries if e is not mine]
    found: list[tuple[Path, Entry]] = []
    for path, value in applied.items():
        if path not in live_leaves or live_leaves[path] == value:
            continue
        for entry in others:
            if path in entry.fields:
                found.append((path, entry))
    if found and not force:
        raise conflicts_error(*error_for, found)
    for path, entry in found:
        entry.fields = {p for p in entry.fields if p != path and p[:len(path)] != path}
    previous = mine.fields if mine is not None else set()
    dropped = previous - applied.keys()
    owned_by_others: set[Path] = set()
    for entry in others:
        owned_by_others |= entry.fields
    result = live
    if dropped:
        result = _remove(live, dropped, owned_by_others | set(applied), schema, subresource)
    result = merge(result, _strip_nulls(config))
    if mine is None:
        mine = Entry(manager, "Apply", api_version, now, set(), sub)
        entries.append(mine)
    mine.fields = set(applied)
    mine.time, mine.api_version = now, api_version
    result["metadata"]["managedFields"] = render_entries(entries)
    return result


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _remove(obj: dict[str, Any], dropped: set[Path], kept: set[Path],
            schema: dict[str, Any] | None, subresource: str | None) -> dict[str, Any]:
    """A copy of `obj` without the dropped paths nobody else keeps."""
    out: dict[str, Any] = orjson.loads(orjson.dumps(obj))
    for path in sorted(dropped, key=len, reverse=True):
        if path in kept:
            continue
        if path[-1] == _ITEM:
            item = path[:-1]
            if any(p[:len(item)] == item for p in kept):
                continue
            _delete(out, item)
        elif not any(p[:len(path)] == path for p in kept):
            _delete(out, path)
    return out


def _delete(obj: Any, path: Path) -> None:
    parent: Any = obj
    for el in path[:-1]:
        parent = _step(parent, el)
        if parent is None:
            return
    last = path[-1]
    if last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif last.startswith("k:") and isinstance(parent, list):
        wanted = json.loads(last[2:])
        parent[:] = [i for i in parent if not (isinstance(i, dict) and all(
            i.get(k) == v for k, v in wanted.items()))]
    elif last.startswith("v:") and isinstance(parent, list):
        value = json.loads(last[2:])
        parent[:] = [i for i in parent if i != value]


def _step(node: Any, el: str) -> Any:
    if el.startswith("f:"):
        return node.get(el[2:]) if isinstance(node, dict) else None
    if el.startswith("k:") and isinstance(node, list):
        wanted = json.loads(el[2:])
        return next((i for i in node if isinstance(i, dict) and all(
            i.get(k) == v for k, v in wanted.items())), None)
    return None


_NO_SCHEMA = _Node(None)  # after _list_kind, which it uses
