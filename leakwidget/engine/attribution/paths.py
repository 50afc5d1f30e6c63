"""What keeps it alive: reference paths from a root to objects the run created.

For the top growing Python types (and containers), a few objects created during the run are
taken as specimens, and a breadth-first search climbs ``gc.get_referrers`` from them until it
reaches a *root*: a module global, a class attribute, a closure cell or a default argument of a
function. A type's path is the one to the root that most of its specimens reach: what holds
the growth, not a few objects something else made during the run (a lazy import). Each level of
the search is one scan of the heap (``gc.get_referrers`` of the whole frontier at once), so its
cost is depth × heap size; a deadline and a depth limit bound it, and nothing it touched is kept
when it returns (the result is text).
"""

from __future__ import annotations

import gc
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass

from .result import RefPath

DEADLINE = 0.5  # seconds the whole search may take
MAX_DEPTH = 8  # references climbed from a specimen
MAX_FRONTIER = 512  # objects expanded per level
MAX_INDEX_SCAN = 100_000  # items searched for a list index; beyond, the index is not named
_OWN = "leakwidget.engine"  # the watcher's own objects hold nothing of the user's
_SETUP_STATE = "_run_setup.<locals>.step_fn"  # the runner's closure over the setup's return value


@dataclass
class Target:
    """Specimens of one growing row: objects of a type the run created, or a grown container.

    Holds strong references only until :func:`find_paths` returns (the caller drops it)."""

    name: str  # the row's name (TypeGrowth.name)
    objects: list
    suffix: str = ""  # appended to the path: a container's item type (" → numpy.ndarray")


def type_name(o: object) -> str:
    t = type(o)
    mod = getattr(t, "__module__", None)
    qn = getattr(t, "__qualname__", None) or t.__name__
    return qn if mod in (None, "builtins") else f"{mod}.{qn}"


def _function_name(f: types.FunctionType) -> str:
    return f"{f.__module__}.{f.__qualname__}" if f.__module__ else f.__qualname__


class _Search:
    """The state of one breadth-first climb: nodes, the child each was reached from, and the
    target each belongs to. Only :func:`find_paths` creates it, and drops it before returning."""

    def __init__(self, targets: list[Target]) -> None:
        self.targets = targets
        self.nodes: list = []
        self.child: list[int] = []  # the node this one refers to, on the way to a specimen
        self.specimen: list[int] = []  # the specimen each node was reached from
        self.owner: list[int] = []  # specimen -> its target
        self.index: dict[int, int] = {}  # id(object) -> node
        self.found: dict[int, tuple[str, list[int]]] = {}  # specimen -> (root words, chain)
        self.joins: dict[int, list[tuple[int, int]]] = {}  # specimen -> [(visited node, its child)]
        # Module-like objects too: IPython's user namespace is a module stand-in.
        spaces = [(name, getattr(m, "__dict__", None)) for name, m in list(sys.modules.items())]
        self.modules = {id(d): name for name, d in spaces if isinstance(d, dict)}
        for t, target in enumerate(targets):
            for o in target.objects:
                if id(o) not in self.index:
                    self._add(o, -1, len(self.owner))
                    self.owner.append(t)
        # Our own bookkeeping, and leakwidget's modules (their caches are the watcher's).
        self.own = {id(self.nodes), id(self.child), id(self.specimen), id(self.index),
                    id(self.owner),
                    id(self.found), id(self.joins), id(self.targets), id(self.__dict__),
                    *(id(t.objects) for t in targets), *(id(vars(t)) for t in targets),
                    *(i for i, name in self.modules.items() if name.startswith("leakwidget."))}

    def _add(self, o: object, child: int, specimen: int) -> int:
        self.index[id(o)] = len(self.nodes)
        self.nodes.append(o)
        self.child.append(child)
        self.specimen.append(specimen)
        return len(self.nodes) - 1

    def chain(self, node: int) -> list[int]:
        out = []
        while node >= 0:
            out.append(node)
            node = self.child[node]
        return out

    def level(self, frontier: list[int], deadline: float) -> list[int]:
        """One heap scan: the referrers of every frontier object; roots end their target."""
        objs = [self.nodes[i] for i in frontier]
        frontier_list = id(objs)  # a referrer of every node it holds, alive while referrers is
        try:
            referrers = gc.get_referrers(*objs)
        finally:
            del objs
        by_id = {id(self.nodes[i]): i for i in frontier}
        nxt: list[int] = []
        for r in referrers:
            if time.perf_counter() > deadline:
                break
            if (id(r) == frontier_list or id(r) in self.own or isinstance(r, types.FrameType)
                    or type_name(r).startswith(_OWN)):
                continue
            for c in _refers_to(r, by_id):
                s = self.specimen[c]
                if s in self.found:
                    continue
                root = self._root(r, c)
                if root is not None:
                    words, skip = root
                    self.found[s] = (words, self.chain(c)[skip:])
                elif id(r) in self.index:
                    j = self.index[id(r)]
                    if self.specimen[j] != s:
                        self.joins.setdefault(s, []).append((j, c))
                else:
                    nxt.append(self._add(r, c, s))
        del referrers
        return nxt

    def _root(self, r: object, c: int) -> tuple[str, int] | None:
        """The words for ``r`` when it is a root holding node ``c``, and how many nodes of the
        chain below it are its own machinery (a class's dict, a closure's cell); None when it
        is not a root."""
        child = self.nodes[c]
        if isinstance(r, dict) and (id(r) in self.modules or _is_globals(r)):
            module = self.modules.get(id(r)) or r["__name__"]
            return f"{module}.{_key_of(r, child) or '?'}", 0
        if isinstance(r, type) and self.child[c] >= 0 and any(v is child for v in gc.get_referents(r)):
            # the class's __dict__ holds the next node: a class attribute
            key = _key_of(child, self.nodes[self.child[c]]) if isinstance(child, dict) else None
            if key is not None:
                return f"{r.__module__}.{r.__qualname__}.{key}", 1
        if isinstance(r, types.FunctionType):
            return self._function_root(r, c)
        return None

    def _function_root(self, f: types.FunctionType, c: int) -> tuple[str, int] | None:
        child = self.nodes[c]
        below = self.nodes[self.child[c]] if self.child[c] >= 0 else None
        code = f.__code__
        if child is f.__closure__ and below is not None:
            k = next((i for i, cell in enumerate(child) if cell is below), None)
            name = code.co_freevars[k] if k is not None and k < len(code.co_freevars) else "?"
            if f.__qualname__.endswith(_SETUP_STATE) and f.__module__.startswith(_OWN):
                return "the setup's state", 2
            return f"closure cell '{name}' of {_function_name(f)}", 2
        if child is f.__defaults__ and below is not None:
            k = next((i for i, v in enumerate(child) if v is below), None)
            names = code.co_varnames[:code.co_argcount]
            name = names[len(names) - len(child) + k] if k is not None else "?"
            return f"default argument '{name}' of {_function_name(f)}", 1
        if child is f.__kwdefaults__ and below is not None:
            return f"default argument '{_key_of(child, below) or '?'}' of {_function_name(f)}", 1
        if child is getattr(f, "__dict__", None) and below is not None:
            return f"{_function_name(f)}.{_key_of(child, below) or '?'}", 1
        return None

    def done(self) -> bool:
        return len(self.found) == len(self.owner)

    def _specimen_paths(self) -> Iterator[tuple[int, str, list[int]]]:
        """(specimen, root words, chain of nodes from the root down to the specimen)."""
        for s, (root, chain) in self.found.items():
            yield s, root, chain
        for s, joins in self.joins.items():
            if s in self.found:
                continue
            joined = ((root, [*chain[: chain.index(j) + 1], *self.chain(c)])
                      for j, c in joins for root, chain in self.found.values() if j in chain)
            root_chain = next(joined, None)
            if root_chain is not None:
                yield s, *root_chain

    def paths(self) -> Iterator[tuple[int, str, list[int]]]:
        """(target, root words, chain): per target, the root most of its specimens reach
        (the nearer on a tie), with its shortest chain."""
        votes: dict[int, dict[str, list[list[int]]]] = {}
        for s, root, chain in self._specimen_paths():
            votes.setdefault(self.owner[s], {}).setdefault(root, []).append(chain)
        for t in sorted(votes):
            root, chains = max(votes[t].items(),
                               key=lambda kv: (len(kv[1]), -min(map(len, kv[1]))))
            yield t, root, min(chains, key=len)


def _is_globals(d: dict) -> bool:
    """A module's namespace, in sys.modules or not (IPython's user namespace, exec'd code)."""
    return "__builtins__" in d and isinstance(d.get("__name__"), str)


def _refers_to(r: object, by_id: dict[int, int]) -> list[int]:
    """The frontier nodes ``r`` refers to directly."""
    try:
        return [by_id[id(x)] for x in gc.get_referents(r) if id(x) in by_id]
    except Exception:  # an extension type whose traversal misbehaves
        return []


def _key_of(d: dict, value: object) -> str | None:
    try:
        for k, v in d.items():
            if v is value:
                return k if isinstance(k, str) else repr(k)[:40]
            if k is value:
                return f"key {repr(k)[:40]}"
    except Exception:  # mutated while we looked
        return None
    return None


def _edge(parent: object, child: object) -> str:
    """How ``parent`` holds ``child``, in the words of Python code: [3], ['key'], .attr."""
    if isinstance(parent, dict):
        key = _key_of(parent, child)
        return "" if key is None else (f"[{key!r}]" if not key.startswith("key ") else f"[{key}]")
    if isinstance(parent, (list, tuple)):
        for i, item in enumerate(parent[:MAX_INDEX_SCAN]):
            if item is child:
                return f"[{i}]"
        return "[…]"
    if isinstance(parent, types.CellType | types.MethodType):
        return ""
    try:
        attrs = vars(parent)
    except TypeError:
        return ""
    if child is attrs:
        return ""
    key = _key_of(attrs, child)
    return f".{key}" if key else ""


def _words(search: _Search, root: str, chain: list[int], suffix: str) -> str:
    """``__main__.decoded (list) → [41] numpy.ndarray``."""
    nodes = search.nodes
    text = f"{root} ({type_name(nodes[chain[0]])})"
    attrs_of: set[int] = set()  # instance __dict__s: their keys read as attributes
    for a, b in zip(chain, chain[1:], strict=False):
        parent, child = nodes[a], nodes[b]
        if isinstance(child, dict) and not isinstance(parent, (dict, list, tuple)):
            try:
                if vars(parent) is child:
                    attrs_of.add(b)
                    continue
            except TypeError:
                pass
        if isinstance(parent, types.CellType) or isinstance(child, types.CellType):
            continue  # a closure inside the path: the cell is the function's own machinery
        edge = _edge(parent, child)
        if a in attrs_of and edge.startswith("['"):
            edge = "." + edge[2:-2]
        text += f" \u2192 {edge + ' ' if edge else ''}{type_name(child)}"
    return text + suffix


def find_paths(targets: list[Target], *, deadline: float = DEADLINE,
               max_depth: int = MAX_DEPTH) -> tuple[list[RefPath], str]:
    """One path per target that reaches a root within the bounds; and a note when the search
    stopped at a bound. The targets' objects are not kept."""
    t0 = time.perf_counter()
    stop_at = t0 + deadline
    search = _Search(targets)
    try:
        frontier = list(range(len(search.nodes)))
        depth = 0
        while frontier and depth < max_depth and not search.done():
            if time.perf_counter() > stop_at:
                break
            still_open = [i for i in frontier if search.specimen[i] not in search.found]
            frontier = search.level(still_open[:MAX_FRONTIER], stop_at)
            depth += 1
        out = [
            RefPath(targets[t].name, root, _words(search, root, chain, targets[t].suffix),
                    len(chain))
            for t, root, chain in search.paths()
        ]
        missing = len(targets) - len({p.target for p in out})
        note = ""
        bound = ("the deadline" if time.perf_counter() > stop_at else
                 f"{max_depth} references" if depth >= max_depth and frontier else "")
        if missing and bound:
            note = (f"No reference path was found for {missing} of {len(targets)} growing types "
                    f"within {bound} ({time.perf_counter() - t0:.2f} s): they may be held by a "
                    "running function's local variables, or further from a root.")
        return out, note
    finally:
        search.nodes.clear()
        search.index.clear()
        for target in targets:
            target.objects.clear()
