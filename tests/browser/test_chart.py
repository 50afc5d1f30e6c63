"""The SVG path reader the browser tests use to read bqplot lines back from the page."""

import pytest

from .chart import Line, parse_path


def test_parse_path_reads_bqplot_polylines():
    d = "M1,350L18.18,343.06L35.5,336.1e0"
    assert parse_path(d) == [(1.0, 350.0), (18.18, 343.06), (35.5, 336.1)]


def test_parse_path_reads_space_separated_and_h_v_commands():
    assert parse_path("M 0 10 H 5 V 2 L 7 -1.5") == [(0, 10), (5, 10), (5, 2), (7, -1.5)]


def test_parse_path_of_an_empty_line_has_no_points():
    assert parse_path("") == []


def test_parse_path_rejects_curves():
    with pytest.raises(ValueError, match="unexpected SVG path command 'C'"):
        parse_path("M0,0C1,1,2,2,3,3")


def test_rise_is_positive_for_a_line_climbing_on_screen():
    climbing = Line([(x, 100.0 - 10 * x) for x in range(8)])
    falling = Line([(x, 10.0 * x) for x in range(8)])
    assert climbing.rise() > 0 > falling.rise()
    assert climbing.x_monotone()
    assert not Line([(0, 0), (2, 0), (1, 0)]).x_monotone()
