"""When a site's first chunk is halved: its half-samples are what the interval reads when the site has one chunk (or
always, under intervals="half"), scored beside inference where the chunk count is known early, dropped once a
second chunk makes the interval one over chunks (onnxaff.stats.entry_ci).

The rules only, on plain values: the chunk and its half-sample scores are the site's (SiteState scores them, its
ChunkSchedule keeps the chunk and its Scores the half scores).
"""

from __future__ import annotations


def wanted(intervals: str, chunks: int) -> bool:
    """The interval reads the half-samples of the first chunk: always under "half", under "auto" when the site has
    one chunk (at the end of the data)."""
    return intervals == "half" or (intervals == "auto" and chunks == 1)


def now(intervals: str, chunk_size: int, expected_rows: int | None) -> bool:
    """Score them as soon as the first chunk is cut, beside inference: under "half", and under "auto" when the whole
    data will give the site exactly one chunk (a wrong prediction is caught either way: a second chunk drops them,
    and a one-chunk site without them gets them at the end of the data)."""
    rows = expected_rows
    return intervals == "half" or (intervals == "auto" and rows is not None and chunk_size <= rows < 2 * chunk_size)


def kept(intervals: str, chunks: int) -> bool:
    """The first chunk's halves count for a site of `chunks` chunks: when it has one, or always under "half"; a
    second chunk drops them otherwise, whether it is cut or comes from a merged slice."""
    return chunks == 1 or intervals == "half"
