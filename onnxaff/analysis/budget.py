"""What a planned run will hold in memory and how long its slowest metric takes a chunk, known before any batch.

Estimated from the declared or resolved shapes, so a run that cannot fit is refused in one line that says how
much it would take and what to lower, before the source draws a batch or a site buffers a row (the figures
are lower bounds: onnxruntime's own intermediate tensors come on top).
"""

from __future__ import annotations

import math

import numpy as np

from onnxaff.collection.chunks import ROWS_FLOOR, site_chunk_rows
from onnxaff.collection.stats import HALVES
from onnxaff.errors import option
from onnxaff.foundations.memory import check_fits, size
from onnxaff.graph.reduction import feature_dim, graph_mode, positions, sampled
from onnxaff.metrics.dispatch import serving

FLOAT64 = 8
# Chunk copies (X and Y, float64) the metrics hold while scoring, beyond the buffers and half-samples: measured at
# 64 rows × 10⁵ features, maximum resident set less the buffers' five copies, 4.4 (affinity, one thread), 5.6 (the
# default metrics, two threads), 8.3 (four threads).
METRIC_WORK = 5.0
THREAD_WORK = 1.5
HELD = 3  # a site's chunk as buffered batches, as the float64 chunk metrics read, and as the previous/first chunk
SLOW_CHUNK_SECONDS = 10.0  # a metric slower than this a chunk is announced with its predicted time


def example_shapes(source, inputs) -> dict[str, tuple]:
    """Each input's shape after the batch axis: the source's own (synthetic, arrays), else the declared one."""
    shapes = source.example_shapes()
    return {i.name: tuple(shapes.get(i.name, i.example_shape())) for i in inputs}


def check_batches(source, inputs, batch_size: int) -> None:
    """Refuse a batch that cannot be held (twice: as drawn, and as cast and made contiguous for onnxruntime)."""
    parts = []
    for spec, shape in zip(inputs, example_shapes(source, inputs).values(), strict=True):
        if not all(isinstance(d, int) and d > 0 for d in shape):
            continue  # a symbolic dim the source fills in: its data says
        per_example = math.prod(shape) * np.dtype(spec.dtype).itemsize
        dims = "x".join(map(str, shape))
        parts.append((2 * batch_size * per_example,
                      f"a batch of {batch_size} examples of input {spec.name} ({spec.dtype.name}[{dims}], "
                      f"{size(per_example)} each)",
                      f"lower {option('batch_size')}, or the input's shape ({option('input_shapes')}), or its data"))
    check_fits(parts)


def _dims(site, reduce: str) -> tuple[int | None, int | None]:
    return feature_dim(site, reduce), feature_dim(site.side("y"), reduce)


def check_sites(sites, stage_probes, metrics, config, examples: int) -> None:
    """Refuse chunk buffers (and pooled d×d moments) that cannot be held: rows × features × 8 bytes × copies
    for every site, plus the half-sample copies of the largest one-chunk site and the metrics' working copies of
    its chunks (without them a site of 10⁶ features passed at 7.2 GB of an 8 GB cap and every metric ran out)."""
    check_fits(site_memory(sites, stage_probes, metrics, config, examples) + metric_work(sites, config, examples))


def metric_work(sites, config, examples: int) -> list[tuple[int, str, str]]:
    """What the scoring threads' metrics hold while they score the widest site's chunks (centred copies, QR and
    Gram factors): METRIC_WORK chunk copies for the first thread, THREAD_WORK for each further one."""
    from onnxaff.collection.scoring import default_workers

    mode = graph_mode(config.reduce)
    widths = [(chunk_rows(config, examples, dims, _site_rows(s, config)) * sum(dims) * FLOAT64, s.id) for s in sites
              if None not in (dims := _dims(s, mode))]
    if not widths:
        return []
    widest = max(widths)
    threads = max(1, default_workers() if config.chunk_workers is None else config.chunk_workers)
    copies = METRIC_WORK + THREAD_WORK * (threads - 1)
    return [(int(copies * widest[0]), f"the metrics' working copies of site {widest[1]}'s chunks ({copies:g} "
             f"chunks over {threads} scoring thread(s))", f"lower {option('chunk_size')} or "
             f"{option('chunk_workers')} (or {option('reduce', 'mean')} for fewer features)")]


def chunk_rows(config, examples: int, dims=(None,), per_example: int | None = None) -> int:
    """The rows of a site's chunk of `dims` features (chunk_size "Kd": site_chunk_rows), or fewer where the
    examples give fewer, at `per_example` rows each (rows_per_example; None: unknown, at most K under sample:K)."""
    size = site_chunk_rows(config.chunk_size, dims) or ROWS_FLOOR
    if config.reduce == "positions":
        return size
    return max(2, min(size, examples * _per_example(config, per_example)))


def _per_example(config, per_example: int | None) -> int:
    return per_example or sampled(config.reduce) or 1


def _site_rows(site, config) -> int | None:
    """The rows one example gives `site` before any mask (the budget's bound: a mask leaves rows out); None where
    its rank is not known yet (at most K under sample:K)."""
    return None if site.rank is None else rows_per_example(site, config.reduce, None)


def site_memory(sites, stage_probes, metrics, config, examples: int) -> list[tuple[int, str, str]]:
    """What the sites' chunk buffers, pooled moments and half-samples hold: (bytes, what, what to lower) parts (the
    cost preview, onnxaff.analysis.cost, adds them up too)."""
    moments = any(serving(m).end_input == "moments" for m in metrics)
    parts, widest = [], (0, "")
    for s in sites:
        dx, dy = _dims(s, graph_mode(config.reduce))
        if dx is None or dy is None:
            continue
        rows = chunk_rows(config, examples, (dx, dy), _site_rows(s, config))
        chunk = rows * (dx + dy) * FLOAT64
        widest = max(widest, (chunk, s.id))
        parts.append((HELD * chunk, f"site {s.id}'s {rows:,}-row chunks of {dx:,} + {dy:,} features",
                      f"lower {option('chunk_size')} (or {option('reduce', 'mean')} for fewer features)"))
        if moments:
            parts.append((3 * (dx + dy) ** 2 * FLOAT64, f"site {s.id}'s pooled moments ({dx + dy:,}² float64)",
                          f"leave the pooled-moment metrics out of {option('metrics')}, or {option('reduce', 'mean')} "
                          "for fewer features"))
    for probes in stage_probes:
        d = [feature_dim(p, graph_mode(config.reduce)) for p in probes]
        if None not in d:
            rows = chunk_rows(config, examples, (sum(d),))
            parts.append((HELD * rows * sum(d) * FLOAT64, f"a residual stage's {rows:,}-row chunks of {sum(d):,} "
                          "features", f"lower {option('chunk_size')}"))
    if widest[0]:
        parts.append((HALVES // 2 * widest[0], f"the one-chunk interval's {HALVES} half-samples of site {widest[1]}",
                      f"lower {option('chunk_size')}"))
    return parts


def rows_per_example(site, reduce: str, mask) -> int | None:
    """The rows one example gives a site: 1, except under reduce="positions", where every position of a rank ≥ 3
    tensor is a row, and "sample:K", K of them (None when one of those dims is symbolic); None under a mask,
    which leaves rows out."""
    if mask is not None:
        return None
    if graph_mode(reduce) != "positions" or site.rank is None or site.rank <= 2:
        return 1
    every = None if site.feature_axis is None else positions(site, "mean")  # what a mean would average
    return every if every is None or sampled(reduce) is None else min(every, sampled(reduce))


def slow_chunk_warnings(sites, metrics, track_metrics, stage_probes, config, examples: int) -> list[str]:
    """One line per metric whose declared cost makes a chunk take long: the predicted time, and what scales."""
    lines = []
    for m in metrics + track_metrics:
        mode = graph_mode(config.reduce)
        dims = ([(*_dims(s, mode), _site_rows(s, config)) for s in sites] if m in metrics else
                [(*(sum(feature_dim(p, mode) or 0 for p in probes),) * 2, None) for probes in stage_probes])
        costs = []  # (seconds a chunk, what, rows a chunk, chunks) per site: under "Kd" each site has its own
        for dx, dy, per in dims:
            rows = chunk_rows(config, examples, (dx, dy), per)
            if (cost := m.chunk_seconds(rows, dx or 0, dy or 0)) is not None:
                costs.append((*cost, rows, max(1, examples * _per_example(config, per) // rows)))
        if not costs or max(c[0] for c in costs) < SLOW_CHUNK_SECONDS:
            continue
        seconds, what, rows, _ = max(costs)
        total = sum(c[0] * c[3] for c in costs)
        chunks = sum(c[3] for c in costs)
        lines.append(f"metric {m.spec}: {what} takes about {_duration(seconds)} a {rows:,}-row chunk, "
                     f"about {_duration(total)} for {chunks:,} chunk(s) over {len(costs)} site(s); a smaller "
                     f"{option('chunk_size')} with more chunks scales (or a metric on pooled moments)")
    return lines


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
