"""Toggles: what a run asks of its stages, one value from the command line or the strip to the
stage session; and the stage's own on / serial / off rules. No TensorFlow needed."""

from __future__ import annotations

import dataclasses

import pytest

from leakwidget import stages
from leakwidget.engine.spec import WatchSpec
from leakwidget.stages import AS_WRITTEN, Stage, Toggles


def test_off_and_serial_parse_once_into_one_value_that_reads_as_the_flags() -> None:
    t = Toggles.parse(off="map@4, prefetch,,map@4", serial=["interleave"])
    assert t.off == ("map@4", "prefetch") and t.serial == ("interleave",)
    assert str(t) == "map@4 off, prefetch off, interleave serial"
    assert str(AS_WRITTEN) == "as written" and not AS_WRITTEN and t
    assert Toggles.parse(off="map", serial="map").off == ("map",)  # named twice: off
    with pytest.raises(TypeError, match="off: stage ids must be strings"):
        Toggles.parse(off=[4])
    with pytest.raises(ValueError, match="bogus"):
        Toggles((("map", "bogus"),))


def test_a_stage_named_by_id_and_kind_takes_the_state_farther_from_on() -> None:
    t = Toggles((("map", "serial"), ("map@4", "off"), ("prefetch@2", "on")))
    assert t.wanted("map@4", "map") == "off"
    assert t.wanted("map@9", "map") == "serial"
    assert t.wanted("prefetch@2", "prefetch") == "on" and t.wanted("x@1", "x") == "on"


def test_a_stage_runs_as_the_nearest_state_it_can_take() -> None:
    batch = Stage(id="batch@3", kind="batch", site="3", toggleable=False, parallel=True)
    source = Stage(id="range@1", kind="range", site="1")
    shuffle = Stage(id="shuffle@2", kind="shuffle", site="2", toggleable=True)
    assert [batch.takes(s) for s in ("on", "serial", "off")] == ["on", "serial", "serial"]
    assert [source.takes(s) for s in ("on", "serial", "off")] == ["on", "on", "on"]
    assert [shuffle.takes(s) for s in ("on", "serial", "off")] == ["on", "on", "off"]
    assert (batch.off_state, shuffle.off_state) == ("serial", "off")
    assert Toggles.parse(off="batch").state_for(batch) == "serial"


def test_the_strips_wishes_replace_what_they_name_and_keep_the_rest() -> None:
    # --off map named a kind; the strip shows two map stages, one clicked back on. The kind
    # gives way to the ids shown; what the strip does not show is kept.
    spec = WatchSpec(step=lambda: None, toggles=Toggles.parse(off="map", serial="other@9"))
    wishes = Toggles.from_strip({"map@4": "on", "map@7": "off", "batch@8": "serial"}, ["map", "map", "batch"])
    nxt = spec.toggles.updated(wishes)
    assert nxt.off == ("map@7",) and nxt.serial == ("other@9", "batch@8")
    assert nxt.wanted("map@4", "map") == "on"
    assert dataclasses.replace(spec, toggles=nxt).toggles is nxt
    with pytest.raises(TypeError, match="Toggles"):
        WatchSpec(step=lambda: None, toggles={"map": "off"})  # type: ignore[arg-type]


def test_the_session_consults_the_toggles_and_says_why_a_stage_does_less() -> None:
    # Sites in a cell: ids are kind@line.
    with stages.session(toggles=Toggles.parse(off=["reader", "load"], serial="load@2")) as s:
        reader = s.record("reader", ("<cell>", 1, 0), toggleable=False, parallel=True)
        load = s.record("load", ("<cell>", 2, 0), toggleable=True, parallel=False)
    assert (reader.id, reader.state, load.state) == ("reader@1", "serial", "off")
    assert s.notes == [f"reader@1 cannot be switched off ({reader.why_fixed}); it runs serial instead."]
    assert "no neutral substitute" in reader.why_fixed
