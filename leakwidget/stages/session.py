"""The stage session: records stages and applies off/serial while a watch runs (see the
package's docstring)."""


from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
import warnings
from collections.abc import Iterable
from typing import Any

# The call-site helpers live in sites.py, which tfdata/ imports too (importing this module
# from there would be a cycle); is_cell_file stays importable from here.
from . import tfdata
from .sites import caller_site, format_site, short_repr
from .stage import Stage, StageState
from .toggles import AS_WRITTEN, Toggles

_ACTIVE: StageSession | None = None
_ACTIVE_LOCK = threading.Lock()


def active_session() -> StageSession | None:
    """The entered StageSession, if any (user stages record themselves into it)."""
    return _ACTIVE


class StageSession:
    """Records stages and applies the toggles while entered. Re-enterable, not nestable."""

    def __init__(self, toggles: Toggles = AS_WRITTEN) -> None:
        self.toggles = toggles
        self._stages: dict[tuple, Stage] = {}
        self._ids: set[str] = set()
        self._notes: list[str] = []
        self._warned: set[str] = set()
        self._lock = threading.RLock()
        self._entered = False
        self._tf_patches: tfdata.Patches | None = None  # while entered
        self._hook: _TensorFlowImportHook | None = None
        self.tensorflow_seen = False
        # first results of user stages that are off: bounded by the number of stages
        self.first_results: dict[str, Any] = {}
        self._tf_available: bool | None = None

    # -- public read side -------------------------------------------------------------------
    @property
    def stages(self) -> list[Stage]:
        with self._lock:
            return list(self._stages.values())

    @property
    def notes(self) -> list[str]:
        """Why toggles did nothing or less than asked, computed when read: a name in
        off/serial that matches no stage recorded so far is reported with the ids that exist."""
        with self._lock:
            notes = list(self._notes)
        unknown = self._unknown_note()
        if unknown and unknown[1] not in notes:
            notes.append(unknown[1])
        return notes

    def stage(self, stage_id: str) -> Stage | None:
        with self._lock:
            for s in self._stages.values():
                if s.id == stage_id:
                    return s
        return None

    # -- recording ----------------------------------------------------------------------------
    def record(
        self,
        kind: str,
        site: tuple[str, int, int] | None = None,
        *,
        args: dict[str, Any] | None = None,
        inputs: Iterable[str] = (),
        toggleable: bool = False,
        parallel: bool = False,
        stage_id: str | None = None,
    ) -> Stage:
        """Record (or find again) the stage built at ``site``; returns it with its state set.

        The same call site always gives back the same Stage, so a pipeline rebuilt on every
        step does not grow the list.
        """
        if site is None:
            site = caller_site(2)
        filename, line, col = site
        key = (kind, filename, line, col) if stage_id is None else (kind, stage_id)
        with self._lock:
            known = self._stages.get(key)
            if known is not None:
                return known
            if stage_id is None:
                base = f"{kind}@{format_site(filename, line)}"
                stage_id, n = base, 1
                while stage_id in self._ids:
                    n += 1
                    stage_id = f"{base}#{n}"
            site_text = format_site(filename, line) if filename else "TensorFlow"
            st = Stage(
                id=stage_id, kind=kind, site=site_text,
                args={k: short_repr(v) for k, v in (args or {}).items()},
                inputs=tuple(dict.fromkeys(inputs)), toggleable=toggleable, parallel=parallel,
            )
            st.state = self._effective_state(st)
            self._stages[key] = st
            self._ids.add(stage_id)
            return st

    def _add_inputs(self, st: Stage, ids: Iterable[str]) -> None:
        with self._lock:
            st.inputs = tuple(dict.fromkeys((*st.inputs, *(i for i in ids if i != st.id))))

    def _adopt_inner(self, st: Stage, inner: list[str]) -> None:
        """Stages built inside another stage's function (a TFRecordDataset inside an interleave
        lambda) feed it: the last of them become its inputs, and it moves after them."""
        with self._lock:
            by_id = {s.id: s for s in self._stages.values()}
            inner_ids = [i for i in dict.fromkeys(inner) if i in by_id and i != st.id]
            fed = {x for i in inner_ids for x in by_id[i].inputs}
            self._add_inputs(st, [i for i in inner_ids if i not in fed])
            key = next(k for k, v in self._stages.items() if v is st)
            self._stages[key] = self._stages.pop(key)

    def _effective_state(self, st: Stage) -> StageState:
        """What ``st`` runs as (the stage's rule), noting once why it is less than asked."""
        wanted = self.toggles.wanted(st.id, st.kind)
        state = st.takes(wanted)
        if state == wanted:
            return state
        if wanted == "off":
            instead = "it runs serial instead" if state == "serial" else "it stays on"
            self._note_once(f"off:{st.id}", f"{st.id} cannot be switched off ({st.why_fixed}); {instead}.")
        elif st.id in self.toggles.names:  # a bare kind asking for serial is not worth a note per stage
            self._note_once(f"serial:{st.id}", f"{st.id} has no parallelism; --serial leaves it as it is.")
        return state

    def add_note(self, text: str) -> None:
        with self._lock:
            if text not in self._notes and len(self._notes) < 50:
                self._notes.append(text)

    def _note_once(self, key: str, text: str, warn: bool = False) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        self.add_note(text)
        if warn:
            warnings.warn(text, UserWarning, stacklevel=3)

    def _unknown_note(self) -> tuple[list[str], str] | None:
        with self._lock:
            ids = {s.id for s in self._stages.values()}
            kinds = {s.kind for s in self._stages.values()}
        asked = self.toggles.off + self.toggles.serial
        unknown = [n for n in asked if n not in ids and n not in kinds]
        if not unknown:
            return None
        if not ids:
            if self._tf_available is False:
                why = ("TensorFlow is not installed, so no tf.data stages exist; --off/--serial "
                       "only act on functions decorated with @leakwidget.stage")
            elif not self.tensorflow_seen:
                why = ("no stage was recorded: the code did not import TensorFlow or call an "
                       "@leakwidget.stage function while the watch ran")
            else:
                why = ("no tf.data stage was built while the watch ran; build the pipeline in "
                       "the watched cell or its setup so it can be recorded and toggled")
            return unknown, f"--off/--serial {', '.join(unknown)}: {why}."
        return unknown, (f"unknown stage {', '.join(unknown)} in --off/--serial; the recorded "
                         f"stages are: {', '.join(sorted(ids))}.")

    def check_names(self) -> list[str]:
        """Names in off/serial that match no recorded stage id or kind: warns once per set of
        names (``notes`` always lists them). Called on every exit of the session."""
        found = self._unknown_note()
        if found is None:
            return []
        unknown, text = found
        with self._lock:
            key = "unknown:" + ",".join(unknown)
            if key in self._warned:
                return unknown
            self._warned.add(key)
        warnings.warn(text, UserWarning, stacklevel=3)
        return unknown

    # -- enter / exit -----------------------------------------------------------------------
    def __enter__(self) -> StageSession:
        global _ACTIVE
        with _ACTIVE_LOCK:
            if self._entered or _ACTIVE is not None:
                raise RuntimeError("a stage session is already active; watches cannot be nested")
            _ACTIVE = self
            self._entered = True
        try:
            if self._tf_available is None:
                self._tf_available = _tensorflow_installed()
                if not self._tf_available and self.toggles:
                    self.add_note(
                        "TensorFlow is not installed: --off/--serial do nothing for tf.data; they "
                        "only act on functions decorated with @leakwidget.stage."
                    )
            if "tensorflow" in sys.modules and _tf_ready():
                self._patch_tensorflow()
            elif self._tf_available:
                # Patch only if the user's code imports TensorFlow: never import it ourselves.
                self._hook = _TensorFlowImportHook(self)
                sys.meta_path.insert(0, self._hook)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def _patch_tensorflow(self) -> None:
        if self._tf_patches is None and self._entered:
            self.tensorflow_seen = True
            try:
                self._tf_patches = tfdata.install(self)
            except Exception as exc:  # an unknown TensorFlow version must not break the run
                self.add_note(f"tf.data stages cannot be recorded with this TensorFlow ({exc!r}); "
                              "--off/--serial do nothing for tf.data.")

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        global _ACTIVE
        # Restore first, before anything that could raise: this runs on every way out.
        try:
            if self._hook is not None:
                try:
                    sys.meta_path.remove(self._hook)
                except ValueError:
                    pass
                self._hook.session = None
                self._hook = None
            if self._tf_patches is not None:
                patches, self._tf_patches = self._tf_patches, None
                patches.restore()
        finally:
            with _ACTIVE_LOCK:
                if _ACTIVE is self:
                    _ACTIVE = None
                self._entered = False
        try:
            self.check_names()
        except Exception:  # e.g. warnings turned into errors: never mask the user's exception
            if exc_type is None:
                raise

    def close(self) -> None:
        """Drop cached first results (they may hold large arrays)."""
        self.first_results.clear()

    def __repr__(self) -> str:
        return f"StageSession(toggles={str(self.toggles)!r}, stages={len(self._stages)})"


def session(off: str | Iterable[str] = (), serial: str | Iterable[str] = (), *,
            toggles: Toggles | None = None) -> StageSession:
    """A StageSession for a watch: ``with session(toggles): ...``, or ``session(off=["map@4"])``
    (ids and kinds as ``--off`` / ``--serial`` take them)."""
    return StageSession(toggles if toggles is not None else Toggles.parse(off, serial))


# --------------------------------------------------------------------------------------------
# TensorFlow detection without importing it


def _tensorflow_installed() -> bool:
    if "tensorflow" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):
        return False


def _tf_ready() -> bool:
    # True once tensorflow finished importing (a half-imported module has no tf.data yet).
    mod = sys.modules.get("tensorflow")
    spec = getattr(mod, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return False
    return "tensorflow.python.data.ops.dataset_ops" in sys.modules


class _LoaderProxy(importlib.abc.Loader):
    """Delegates to TensorFlow's own loader and patches tf.data once the import finished."""

    def __init__(self, loader: Any, hook: _TensorFlowImportHook) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            # The module keeps TensorFlow's loader, not this proxy.
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        sess = self._hook.session
        if sess is not None:
            sess._patch_tensorflow()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class _TensorFlowImportHook(importlib.abc.MetaPathFinder):
    """sys.meta_path entry that notices ``import tensorflow`` during a session."""

    def __init__(self, sess: StageSession) -> None:
        self.session: StageSession | None = sess

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "tensorflow" or self.session is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderProxy(spec.loader, self)
                return spec
        return None
