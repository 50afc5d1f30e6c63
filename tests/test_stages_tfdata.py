"""tf.data stages: recording, neutral substitutes, TensorFlow's own stages, restoring patches.

Real TensorFlow on the CPU, with TFRecord files the tests write to a temporary folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

# Collecting the suite imports no TensorFlow (tests/conftest.py): it is imported when this file's
# first test runs.
tf: Any = None


@pytest.fixture(autouse=True, scope="module")
def _tensorflow() -> None:
    global tf
    tf = pytest.importorskip("tensorflow")


sys.path.insert(0, str(Path(__file__).parent))
from conftest_tf import patched_identities, write_tfrecords  # noqa: E402

from leakwidget import stages  # noqa: E402
from leakwidget.engine.spec import WatchSpec  # noqa: E402
from leakwidget.engine.watch import Watch  # noqa: E402
from leakwidget.stages import Toggles  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def tfrecords(tmp_path: Path) -> list[str]:
    """Three small TFRecord files; record j of file i is b"i-j"."""
    pytest.importorskip("tensorflow")
    return write_tfrecords(tmp_path / "records")
THIS = str(Path(__file__).resolve())


def line_of(marker: str) -> int:
    """Line number in this file of the line that ends with ``# <marker>``."""
    for n, text in enumerate(Path(THIS).read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# <{marker}>"):
            return n
    raise AssertionError(marker)


def values(ds) -> list:
    out = []
    for x in ds:
        v = x.numpy() if hasattr(x, "numpy") else x
        out.append(v.tolist() if hasattr(v, "tolist") else v)
    return out


def by_kind(sess, kind: str):
    found = [s for s in sess.stages if s.kind == kind]
    assert found, f"no {kind} stage in {[s.id for s in sess.stages]}"
    return found[0]


PY_CALLS: list = []


def _count(x):
    PY_CALLS.append(1)
    return x


def build_pipeline(files: list[str]):
    names = tf.data.Dataset.from_tensor_slices(files)
    ds = names.interleave(lambda f: tf.data.TFRecordDataset(f),  # <interleave>
                          cycle_length=2, num_parallel_calls=2)
    ds = ds.shuffle(16).repeat(2)  # <shuffle>
    ds = ds.map(lambda r: tf.py_function(_count, [r], tf.string))  # <map>
    other = tf.data.Dataset.from_tensors(b"x").repeat()  # <other>
    ds = tf.data.Dataset.sample_from_datasets([ds, other], stop_on_empty_dataset=True)  # <sample>
    return ds.batch(4, num_parallel_calls=2).prefetch(2)  # <tail>


def test_every_stage_is_recorded_with_site_arguments_and_inputs(tfrecords):
    with stages.session() as sess:
        ds = build_pipeline(tfrecords)
        next(iter(ds))
    ids: dict[str, str] = {}
    for s in sess.stages:
        ids.setdefault(s.kind, s.id)  # the first of each kind
    assert ids["map"] == f"map@{THIS}:{line_of('map')}"
    assert ids["shuffle"] == f"shuffle@{THIS}:{line_of('shuffle')}"
    # built inside the interleave lambda (autograph rewrites it): still the user's line
    assert ids["TFRecordDataset"] == f"TFRecordDataset@{THIS}:{line_of('interleave')}"
    stage = {s.id: s for s in sess.stages}
    assert stage[ids["interleave"]].inputs == (ids["TFRecordDataset"],)
    assert stage[ids["interleave"]].parallel and stage[ids["interleave"]].toggleable
    assert stage[ids["repeat"]].inputs == (ids["shuffle"],) and not stage[ids["repeat"]].toggleable
    assert stage[ids["map"]].args["python"] == "tf.py_function"
    assert stage[ids["map"]].inputs == (ids["repeat"],)
    sample = stage[ids["sample_from_datasets"]]
    assert sample.inputs[0] == ids["map"] and len(sample.inputs) == 2
    assert stage[ids["batch"]].parallel and not stage[ids["batch"]].toggleable
    assert stage[ids["prefetch"]].args == {"buffer_size": "2"}
    # TensorFlow's own stages are offered as toggles too
    assert {"autotune", "inject_prefetch", "map_parallelization", "parallel_batch"} <= set(stage)
    # sample_from_datasets calls .batch/.map internally: those are not the user's stages
    assert sum(s.kind == "batch" for s in sess.stages) == 1
    assert all(s.state == "on" for s in sess.stages)


def test_numpy_function_inside_map_is_noted():
    with stages.session() as sess:
        tf.data.Dataset.range(3).map(lambda x: tf.numpy_function(lambda v: v, [x], tf.int64))
    assert by_kind(sess, "map").args["python"] == "tf.numpy_function"


def test_ids_are_the_cell_line_and_stay_when_the_same_cell_runs_again():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    cell = "import tensorflow as tf\nds = tf.data.Dataset.range(8)\nds = ds.map(lambda x: x + 1).map(lambda x: x * 2)\nds = ds.prefetch(1)\n"
    runs = []
    for _ in range(2):
        with stages.session(off=["map@3"]) as sess:
            result = shell.run_cell(cell, store_history=True)  # a new execution count each run
            result.raise_error()
            out = values(shell.user_ns["ds"])
        runs.append(([s.id for s in sess.stages if "@" in s.id], out))
    assert runs[0] == runs[1]
    ids, out = runs[0]
    assert ids == ["map@3", "map@3#2", "prefetch@4"]
    assert out == [2] * 8  # first map off: every element is its first output, 0 + 1
    # ipykernel names cells /tmp/ipykernel_<pid>/<hash>.py: cell code too
    assert stages.is_cell_file("/tmp/ipykernel_4242/1234567.py")
    assert not stages.is_cell_file(THIS)


def test_pass_through_substitutes_keep_the_elements(tfrecords):
    def build():
        return tf.data.TFRecordDataset(tfrecords[0]).cache().shuffle(20, seed=1).prefetch(3)

    with stages.session(off=["shuffle", "prefetch", "cache"]) as sess:
        off = values(build())
    assert off == [f"0-{j}".encode() for j in range(20)]  # shuffle off: file order
    assert {s.kind: s.state for s in sess.stages if "@" in s.id} == {
        "TFRecordDataset": "on", "cache": "off", "shuffle": "off", "prefetch": "off"}
    with stages.session():
        on = values(build())
    assert sorted(on) == sorted(off) and on != off


def test_map_off_repeats_its_first_output_and_keeps_cardinality():
    PY_CALLS.clear()
    with stages.session(off=["map"]):
        ds = tf.data.Dataset.range(10, 20).map(
            lambda x: (tf.py_function(_count, [x], tf.int64), {"twice": 2 * x}), num_parallel_calls=2)
        out = [(a.numpy(), b["twice"].numpy()) for a, b in ds]
    assert out == [(10, 20)] * 10
    assert len(PY_CALLS) == 1  # the function ran once, for the first output


def test_map_off_in_a_pipeline_rebuilt_every_step_stops_building_the_function():
    # Building a map traces its function, and that alone can leak (a py_function registered
    # per trace). Off must therefore not build the user's map again for every rebuild.
    PY_CALLS.clear()
    traces = []

    def fn(x):
        traces.append(1)
        return tf.py_function(_count, [x], tf.int64)

    with stages.session(off=["map"]):
        outs = []
        for _ in range(5):
            ds = tf.data.Dataset.range(3, 6).map(fn)  # same site every time: one stage
            outs.append([int(v) for v in ds])
    assert outs == [[3, 3, 3]] * 5
    assert len(traces) == 1 and len(PY_CALLS) == 1
    # A different input structure at the same site is not given the stored output.
    with stages.session(off=["map"]) as sess:
        sources = [tf.data.Dataset.range(2), tf.data.Dataset.from_tensors(tf.constant([1.5, 2.5]))]
        outs = [[v.numpy().tolist() for v in src.map(lambda x: x + 100)] for src in sources]
    assert len([st for st in sess.stages if st.kind == "map"]) == 1  # one site, one stage
    assert outs == [[100, 100], [[101.5, 102.5]]]


def test_interleave_off_is_sequential_and_serial_keeps_the_cycle(tfrecords):
    def build():
        names = tf.data.Dataset.from_tensor_slices(tfrecords)
        return names.interleave(tf.data.TFRecordDataset, cycle_length=3, block_length=1,
                                num_parallel_calls=3, deterministic=False)

    with stages.session(off=["interleave"]):
        off = values(build())
    assert off == [f"{i}-{j}".encode() for i in range(3) for j in range(20)]
    with stages.session(serial=["interleave"]) as sess:
        serial = values(build())
    assert serial == [f"{i}-{j}".encode() for j in range(20) for i in range(3)]
    assert by_kind(sess, "interleave").state == "serial"


def build_experimental(files: list[str]):
    # The deprecated forms many reported pipelines use, applied as their issues write them.
    names = tf.data.Dataset.from_tensor_slices(files)
    ds = names.apply(tf.data.experimental.parallel_interleave(  # <parallel_interleave>
        tf.data.TFRecordDataset, cycle_length=3, sloppy=True))
    return ds.apply(tf.data.experimental.map_and_batch(  # <map_and_batch>
        lambda r: (tf.py_function(_count, [r], tf.string), tf.strings.length(r)),
        batch_size=4, num_parallel_calls=2))


def test_experimental_parallel_interleave_and_map_and_batch_are_stages(tfrecords):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # their deprecation notices
        with stages.session() as sess:
            on = [(list(a.numpy()), list(b.numpy())) for a, b in build_experimental(tfrecords)]
        interleave, mapped = by_kind(sess, "interleave"), by_kind(sess, "map")
        assert interleave.id == f"interleave@{THIS}:{line_of('parallel_interleave')}"
        assert interleave.args["form"] == "tf.data.experimental.parallel_interleave"
        assert mapped.id == f"map@{THIS}:{line_of('map_and_batch')}"
        assert mapped.args["batch_size"] == "4" and mapped.args["python"] == "tf.py_function"
        assert interleave.id in mapped.inputs and interleave.toggleable and mapped.parallel
        assert sorted(r for batch, _ in on for r in batch) == sorted(
            f"{i}-{j}".encode() for i in range(3) for j in range(20))

        PY_CALLS.clear()
        with stages.session(off=["interleave", "map"]):
            off = [(list(a.numpy()), list(b.numpy())) for a, b in build_experimental(tfrecords)]
    # Interleave off: one file after the other; map off: every element is the first output,
    # still batched by 4 (60 records, 15 batches), and the function ran once.
    assert off == [([b"0-0"] * 4, [3] * 4)] * 15
    assert len(PY_CALLS) == 1


def test_compat_v1_pipelines_are_recorded_and_toggled(tfrecords):
    # tf.compat.v1's datasets wrap the v2 methods (and build map themselves): the stages are
    # the user's lines all the same, and an off map still gives a v1 dataset.
    def build():
        ds = tf.compat.v1.data.TFRecordDataset(tfrecords)  # <v1_source>
        return ds.shuffle(8).map(tf.strings.length).batch(4)  # <v1_chain>

    with stages.session(off=["map", "shuffle"]) as sess:
        it = tf.compat.v1.data.make_one_shot_iterator(build())
        first = it.get_next().numpy().tolist()
    chain = f"{THIS}:{line_of('v1_chain')}"
    assert {s.id: s.state for s in sess.stages if "@" in s.id} == {
        f"TFRecordDataset@{THIS}:{line_of('v1_source')}": "on", f"shuffle@{chain}": "off",
        f"map@{chain}": "off", f"batch@{chain}": "on"}
    assert first == [3, 3, 3, 3]  # len(b"0-0"), the first record, for every element


def test_tfrecord_reader_off_reads_one_file_at_a_time(tfrecords):
    with stages.session(off=["TFRecordDataset"]) as sess:
        out = values(tf.data.TFRecordDataset(tfrecords, num_parallel_reads=3))
    assert out == [f"{i}-{j}".encode() for i in range(3) for j in range(20)]
    assert by_kind(sess, "TFRecordDataset").state == "off"


def test_mixing_off_keeps_the_first_input_only():
    a = tf.data.Dataset.range(0, 5)
    b = tf.data.Dataset.range(100, 105)
    with stages.session(off=["sample_from_datasets", "choose_from_datasets"]):
        sampled = values(tf.data.experimental.sample_from_datasets([a, b], seed=3))  # the alias
        chosen = values(tf.data.Dataset.choose_from_datasets(
            [a, b], tf.data.Dataset.from_tensor_slices(tf.constant([1, 0, 1], tf.int64))))
    assert sampled == [0, 1, 2, 3, 4]
    assert chosen == [0, 1, 2, 3, 4]


def test_batch_serial_keeps_the_structure_and_batch_off_is_explained():
    with pytest.warns(UserWarning, match="batch@nowhere"):
        with stages.session(serial=["batch"], off=["batch@nowhere", "repeat"]) as sess:
            out = values(tf.data.Dataset.range(7).batch(3, num_parallel_calls=2).repeat(1))
    assert out == [[0, 1, 2], [3, 4, 5], [6]]
    assert by_kind(sess, "batch").state == "serial"
    assert by_kind(sess, "repeat").state == "on"
    notes = " ".join(sess.notes)
    assert "cannot be switched off" in notes and "repeat@" in notes
    assert "batch@nowhere" in notes  # unknown id: named, with the ids that exist


def test_unknown_stage_id_is_named_with_the_recorded_ids():
    with pytest.warns(UserWarning, match="unknown stage map@999"):
        with stages.session(off=["map@999"]) as sess:
            values(tf.data.Dataset.range(3).map(lambda x: x))
    note = sess.notes[-1]
    assert "map@999" in note and f"map@{THIS}:" in note and "inject_prefetch" in note


def test_everything_off_gives_a_serial_pipeline():
    """With every parallel stage serial and TensorFlow's own stages off, the map function runs
    only while the consumer waits in next(): nothing computes ahead in the background."""
    inside = threading.Event()
    grew = threading.Condition()

    def consume(n: int, wait: float) -> tuple[list[bool], list[int]]:
        """Take n batches of 2; after each, count the map calls so far (waiting up to
        ``wait`` for calls beyond what was taken). Returns (inside flags, counts)."""
        seen: list[bool] = []  # per run: a previous run's iterator may still be finishing

        def f(x):
            with grew:
                seen.append(inside.is_set())
                grew.notify_all()
            return x

        ds = (tf.data.Dataset.range(40)
              .map(lambda x: tf.py_function(f, [x], tf.int64), num_parallel_calls=2)
              .batch(2, num_parallel_calls=2))
        it = iter(ds)
        counts = []
        for taken in range(1, n + 1):
            inside.set()
            next(it)
            inside.clear()
            with grew:  # give a background thread the chance to run ahead
                grew.wait_for(lambda t=taken: len(seen) > 2 * t, timeout=wait)
                counts.append(len(seen))
        with grew:
            return list(seen), counts

    _, counts = consume(3, wait=10.0)  # defaults: parallel map and batch, injected prefetch
    assert any(c > 2 * t for t, c in enumerate(counts, 1)), "TensorFlow did not run ahead"

    # Making the user's stages serial is not enough: TensorFlow's own stages still run ahead.
    with stages.session(serial=["map", "batch"]):
        _, counts = consume(3, wait=10.0)
    assert any(c > 2 * t for t, c in enumerate(counts, 1)), "expected TF's stages to run ahead"

    off = ["autotune", "inject_prefetch", "map_parallelization", "parallel_batch",
           "map_and_batch_fusion"]
    with stages.session(off=off, serial=["map", "batch"]) as sess:
        seen, counts = consume(4, wait=0.3)
    assert counts == [2, 4, 6, 8], "elements were computed ahead of the consumer"
    assert all(seen), "a map call ran while the consumer was not waiting"
    assert {s.id: s.state for s in sess.stages if s.id in off} == dict.fromkeys(off, "off")


def test_patches_are_restored_after_an_error_and_an_interrupt():
    before = patched_identities()
    for exc in (ValueError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(exc)):
            with stages.session(off=["map"]):
                assert patched_identities() != before  # patched while entered
                tf.data.Dataset.range(3).map(lambda x: x)
                raise exc
        assert patched_identities() == before
        assert all(a is b for a, b in zip(patched_identities().values(), before.values(), strict=True))
    assert stages.active_session() is None


def test_patches_are_restored_when_a_watched_step_is_interrupted():
    before = patched_identities()

    def setup():
        return iter(tf.data.Dataset.range(100).map(lambda x: x).prefetch(2))

    def step(it):
        next(it)
        if len(patched_identities()) and patched_identities() != before:
            raise KeyboardInterrupt

    result = Watch(WatchSpec(step=step, setup=setup, iterations=50, toggles=Toggles.parse(off=("prefetch",))),
                   tracker=False).run()
    assert result.stopped == "interrupted"
    assert [s.kind for s in result.stages if "@" in s.id] == ["map", "prefetch"]
    assert all(a is b for a, b in zip(patched_identities().values(), before.values(), strict=True))


def test_session_never_imports_tensorflow_and_patches_when_the_code_does(tmp_path):
    """A fresh interpreter: entering a session must not import TensorFlow; importing it inside
    the session patches tf.data at once; leaving restores it and removes the import hook."""
    code = textwrap.dedent("""
        import json, sys, warnings
        warnings.simplefilter("ignore")
        from leakwidget import stages
        with stages.session(off=["prefetch"]) as s:
            pass
        first = "tensorflow" in sys.modules
        hooks = sum(type(f).__name__ == "_TensorFlowImportHook" for f in sys.meta_path)
        with stages.session(off=["prefetch"]) as s:
            import tensorflow as tf
            patched = tf.data.Dataset.__dict__["prefetch"]
            out = [int(x) for x in tf.data.Dataset.range(3).prefetch(2)]
        after = tf.data.Dataset.__dict__["prefetch"]
        print(json.dumps({
            "imported_by_empty_session": first,
            "patched_inside": patched is not after,
            "restored_is_original": after.__qualname__ == "DatasetV2.prefetch"
                                    and not hasattr(after, "__wrapped__"),
            "hook_removed": hooks == 0 and not any(
                type(f).__name__ == "_TensorFlowImportHook" for f in sys.meta_path),
            "states": {st.kind: st.state for st in s.stages},
            "out": out,
            "loader": type(tf.__spec__.loader).__name__,
        }))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["imported_by_empty_session"] is False
    assert got["patched_inside"] and got["restored_is_original"] and got["hook_removed"]
    assert got["states"]["prefetch"] == "off" and got["out"] == [0, 1, 2]
    assert got["loader"] != "_LoaderProxy"


def test_a_pipeline_rebuilt_every_step_keeps_one_stage_per_site(tmp_path):
    files = write_tfrecords(tmp_path, files=1, records=4)
    with stages.session() as sess:
        for _ in range(5):
            values(tf.data.TFRecordDataset(files).map(lambda r: r).prefetch(1))
    assert [s.kind for s in sess.stages if "@" in s.id] == ["TFRecordDataset", "map", "prefetch"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sess.check_names() == []
