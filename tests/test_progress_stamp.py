"""The time at the start of every progress line."""

import io

import pytest

from edgeprune.progress import Progress, stamp


@pytest.mark.parametrize(("seconds", "text"), [(0.0, "00:00.0"), (7.04, "00:07.0"), (59.94, "00:59.9"),
                                               (59.96, "01:00.0"), (239.96, "04:00.0"), (3599.95, "60:00.0"),
                                               (754.25, "12:34.2")])
def test_a_stamp_rounds_to_a_tenth_before_it_splits_minutes_from_seconds(seconds, text):
    """A fit's log read "[03:60.0]": the seconds were rounded after the minutes were taken."""
    assert stamp(seconds) == text


def test_each_line_starts_with_its_stamp():
    stream = io.StringIO()
    Progress(stream=stream, bars=False).note("exported")
    line = stream.getvalue()
    assert line.startswith("[00:00.") and line.endswith("] exported\n")
