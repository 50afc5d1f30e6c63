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
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .pathwords import function_name, named, type_name, words
from .result import RefPath

# CPU seconds the whole search may take (this thread's: a machine busy with other work makes
# the search slower, not shorter, so the same heap gets the same answer under load). With
# TensorFlow's heap a level takes 0.1-0.2 s: the path to what a from_generator pipeline built
# each step keeps (TensorFlow's global graph, holders.py) took 1.5 s; at 0.5 s none was given.
DEADLINE = 2.0
MAX_DEPTH = 8  # references climbed from a specimen
MAX_FRONTIER = 512  # objects expanded per level
_OWN = "leakwidget.engine"  # the watcher's own objects hold nothing of the user's
_SETUP_STATE = "_run_setup.<locals>.step_fn"  # the runner's closure over the setup's return value


@dataclass
class Target:
    """Specimens of one growing row: objects of a type the run created, or a grown container.

    Holds strong references only until :func:`find_paths` returns (the caller drops it)."""

    name: str  # the row's name (TypeGrowth.name)
    objects: list
    item: str = ""  # a container row: its items' type, which the path ends at
    holds: str = ""  # a dict row: whether its "values" or its "keys" are what grows


def _namespaces() -> dict[int, str]:
    """Module namespaces by id, each named by its own ``__name__`` (``__main__``, not an alias
    such as multiprocessing's ``__mp_main__``); module-like objects too: IPython's user
    namespace is a module stand-in."""
    out: dict[int, str] = {}
    for name, m in list(sys.modules.items()):
        d = getattr(m, "__dict__", None)
        if isinstance(d, dict):
            own = d.get("__name__")
            out[id(d)] = own if isinstance(own, str) else name
    return out


class _Search:
    """The state of one breadth-first climb: nodes, the child each was reached from, and the
    target each belongs to. Only :func:`find_paths` creates it, and drops it before returning."""

    def __init__(self, targets: list[Target], holders: list,
                 existed: Callable[[object], bool] | None = None) -> None:
        self.targets = targets
        self.holders = holders  # untracked containers that may hold frontier objects
        self.existed = existed  # whether an object was alive before the run (None: unknown)
        self.nodes: list = []
        self.child: list[int] = []  # the node this one refers to, on the way to a specimen
        self.specimen: list[int] = []  # the specimen each node was reached from
        self.owner: list[int] = []  # specimen -> its target
        self.index: dict[int, int] = {}  # id(object) -> node
        self.found: dict[int, tuple[str, list[int]]] = {}  # specimen -> (root words, chain)
        self.joins: dict[int, list[tuple[int, int]]] = {}  # specimen -> [(visited node, its child)]
        self.modules = _namespaces()
        for t, target in enumerate(targets):
            for o in target.objects:
                if id(o) not in self.index:
                    self._add(o, -1, len(self.owner))
                    self.owner.append(t)
                    if isinstance(o, dict) and (id(o) in self.modules or _is_globals(o)):
                        # a module's globals grew: the namespace itself is the root
                        name = self.modules.get(id(o)) or o["__name__"]
                        self.found[len(self.owner) - 1] = (f"globals of {name}", [len(self.nodes) - 1])
        # Our own bookkeeping, and leakwidget's modules (their caches are the watcher's).
        self.own = {id(self.nodes), id(self.child), id(self.specimen), id(self.index),
                    id(self.owner),
                    id(self.found), id(self.joins), id(self.targets), id(self.__dict__),
                    id(holders),
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
            if self.holders and not all(map(gc.is_tracked, objs)):
                # nothing tracked refers to what an untracked dict or tuple holds
                referrers += self.holders
        finally:
            del objs
        by_id = {id(self.nodes[i]): i for i in frontier}
        nxt: list[int] = []
        for r in referrers:
            if time.thread_time() > deadline:
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
                    found, skip = root
                    self.found[s] = (found, self.chain(c)[skip:])
                elif (isinstance(r, (types.FunctionType, type, types.ModuleType))
                      and not self._made_holding(r, c)):
                    # A function refers to its globals, a class to its bases, a module to its
                    # namespace: none of them holds the user's objects but as a root does, or
                    # as a function the run made does through its state (climbed through).
                    continue
                elif id(r) in self.index:
                    j = self.index[id(r)]
                    if self.specimen[j] != s:
                        self.joins.setdefault(s, []).append((j, c))
                else:
                    nxt.append(self._add(r, c, s))
        del referrers
        return nxt

    def _made_holding(self, r: object, c: int) -> bool:
        """Whether ``r`` is a function the run made that holds node ``c`` in its own state
        (closure, defaults, attributes): no root, but a link to what holds it."""
        if not isinstance(r, types.FunctionType) or self.existed is None or self.existed(r):
            return False
        child = self.nodes[c]
        return any(child is part for part in (r.__closure__, r.__defaults__, r.__kwdefaults__,
                                              getattr(r, "__dict__", None)))

    def _root(self, r: object, c: int) -> tuple[str, int] | None:
        """The words for ``r`` when it is a root holding node ``c``, and how many nodes of the
        chain below it are its own machinery (a class's dict, a closure's cell); None when it
        is not a root."""
        child = self.nodes[c]
        if isinstance(r, dict) and (id(r) in self.modules or _is_globals(r)):
            return named(self.modules.get(id(r)) or r["__name__"], r, child), 0
        below = self.nodes[self.child[c]] if self.child[c] >= 0 else None
        if (isinstance(r, type) and isinstance(child, dict) and below is not None
                and any(v is child for v in gc.get_referents(r))):
            # the class's __dict__ holds the next node: a class attribute
            return named(f"{r.__module__}.{r.__qualname__}", child, below), 1
        if isinstance(r, types.FunctionType) and (self.existed is None or self.existed(r)):
            # A function made during the run is no root: something holds it, as the run made
            # it (a dataset made per iteration keeps the lambdas TensorFlow's autograph made of
            # the user's map function, with a py_function's EagerFunc on each: "kept alive by
            # closure cell 'func' of __main__.outer_factory.<locals>…" named no one's code).
            return self._function_root(r, c)
        return None

    def _function_root(self, f: types.FunctionType, c: int) -> tuple[str, int] | None:
        child = self.nodes[c]
        below = self.nodes[self.child[c]] if self.child[c] >= 0 else None
        if below is None:
            return None
        code = f.__code__
        if child is f.__closure__:
            k = next((i for i, cell in enumerate(child) if cell is below), None)
            name = code.co_freevars[k] if k is not None and k < len(code.co_freevars) else "?"
            if f.__qualname__.endswith(_SETUP_STATE) and f.__module__.startswith(_OWN):
                return "the setup's state", 2
            return f"closure cell '{name}' of {function_name(f)}", 2
        if child is f.__defaults__:
            k = next((i for i, v in enumerate(child) if v is below), None)
            names = code.co_varnames[:code.co_argcount]
            name = names[len(names) - len(child) + k] if k is not None else "?"
            return f"default argument '{name}' of {function_name(f)}", 1
        if child is f.__kwdefaults__:
            key = named("", child, below).lstrip(".")
            return f"default argument '{key}' of {function_name(f)}", 1
        if child is getattr(f, "__dict__", None):
            return named(function_name(f), child, below), 1
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


def find_paths(targets: list[Target], *, holders: list | None = None,
               existed: Callable[[object], bool] | None = None, deadline: float = DEADLINE,
               max_depth: int = MAX_DEPTH) -> tuple[list[RefPath], str]:
    """One path per target that reaches a root within the bounds; and a note when the search
    stopped at a bound. ``holders``: untracked containers that may hold the objects met on the
    way (gc.get_referrers sees only tracked referrers); ``existed``: whether an object was alive
    before the run (a function made during it is no root). The targets' objects are not kept."""
    t0 = time.thread_time()
    stop_at = t0 + deadline
    search = _Search(targets, holders if holders is not None else [], existed)
    try:
        frontier = list(range(len(search.nodes)))
        depth = 0
        while frontier and depth < max_depth and not search.done():
            if time.thread_time() > stop_at:
                break
            still_open = [i for i in frontier if search.specimen[i] not in search.found]
            frontier = search.level(still_open[:MAX_FRONTIER], stop_at)
            depth += 1
        out = [
            RefPath(targets[t].name, root,
                    words([search.nodes[i] for i in chain], root, targets[t].item, targets[t].holds),
                    len(chain))
            for t, root, chain in search.paths()
        ]
        missing = len(targets) - len({p.target for p in out})
        bound = ("the deadline" if time.thread_time() > stop_at else
                 f"{max_depth} references" if depth >= max_depth and frontier else "")
        note = ""
        if missing:
            within = f" within {bound}" if bound else ""
            note = (f"No reference path from a root was found for {missing} of {len(targets)} "
                    f"growing types{within} ({time.thread_time() - t0:.2f} s): they may be held "
                    "by a running function's local variables"
                    f"{', or further from a root' if bound else ''}.")
        return out, note
    finally:
        search.nodes.clear()
        search.index.clear()
        for target in targets:
            target.objects.clear()
