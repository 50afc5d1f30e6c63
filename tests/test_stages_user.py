"""@leakwidget.stage: user functions as toggleable stages (no TensorFlow needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

import leakwidget
from leakwidget import stages
from leakwidget.stages.user import stage

THIS = str(Path(__file__).resolve())


def test_outside_a_watch_the_function_is_unchanged():
    calls = []

    @stage
    def double(x):
        calls.append(x)
        return 2 * x

    assert [double(i) for i in range(3)] == [0, 2, 4]
    assert calls == [0, 1, 2]
    assert double.__name__ == "double"


def test_off_returns_the_first_result_again_and_on_runs_the_function():
    calls = []

    @stage
    def load(i):
        calls.append(i)
        return {"image": [i] * 3}

    with stages.session(off=["load"]) as sess:
        out = [load(i) for i in range(4)]
    assert out == [{"image": [0, 0, 0]}] * 4
    assert calls == [0]  # ran once, for the first result
    (st,) = sess.stages
    assert st.id == f"load@{THIS}:{load.__wrapped__.__code__.co_firstlineno}"
    assert (st.kind, st.state, st.toggleable) == ("load", "off", True)

    calls.clear()
    with pytest.warns(UserWarning, match=r"unknown stage other .*recorded stages are: load@"):
        with stages.session(off=["other"]) as sess2:
            assert [load(i)["image"][0] for i in range(3)] == [0, 1, 2]
    assert sess2.stages[0].state == "on" and calls == [0, 1, 2]


def test_identity_returns_the_input_and_name_sets_the_id():
    @stage(identity=True, name="augment")
    def jitter(x, strength=1):
        return [v + strength for v in x]

    with stages.session(off=["augment"]) as sess:
        assert jitter([1, 2]) == [1, 2]
        assert jitter(x=[5]) == [5]
    assert sess.stages[0].id.startswith("augment@")


def test_a_keras_sequence_style_loader_and_a_torch_style_dataset():
    class Loader:  # the shape of keras.utils.Sequence / torch.utils.data.Dataset
        def __init__(self):
            self.calls = 0

        def __len__(self):
            return 5

        @leakwidget.stage
        def __getitem__(self, index):
            self.calls += 1
            return ([index] * 2, index % 2)

    class Augment:
        @stage(identity=True)
        def __call__(self, batch):
            return [v * 10 for v in batch[0]], batch[1]

    loader, augment = Loader(), Augment()
    with stages.session(off=["Loader.__getitem__"]) as sess:
        first = [loader[i] for i in range(len(loader))]
    assert first == [([0, 0], 0)] * 5 and loader.calls == 1
    assert sess.stages[0].kind == "Loader.__getitem__"

    with stages.session(off=["Augment.__call__"]):
        # identity skips self: the batch itself comes back
        assert augment(([1, 2], 1)) == ([1, 2], 1)


def test_a_generator_stage_off_repeats_its_first_item_as_often_as_it_yielded():
    runs = []

    @stage
    def read(n):
        runs.append(n)
        for i in range(n):
            yield f"record-{i}"

    with stages.session(off=["read"]):
        first = list(read(3))
        second = list(read(3))
    assert first == ["record-0", "record-1", "record-2"]  # the first run passes through
    assert second == ["record-0"] * 3
    assert runs == [3]


def test_bad_declarations_are_clear_errors():
    with pytest.raises(TypeError, match="decorates a function"):
        stage(42)
    with pytest.raises(ValueError, match="without '@'"):
        stage(name="a@b")(lambda: None)

    @stage(identity=True)
    def nothing():
        return 1

    with stages.session(off=["nothing"]):
        with pytest.raises(TypeError, match="without an input"):
            nothing()


def test_sessions_cannot_nest_and_close_cleanly():
    with stages.session() as outer:
        with pytest.raises(RuntimeError, match="already active"):
            with stages.session():
                pass
        assert stages.active_session() is outer
    assert stages.active_session() is None
