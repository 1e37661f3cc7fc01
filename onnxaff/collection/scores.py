"""A site's metric scores: each chunk metric's values in chunk order, the first error of each metric, and one chunk
scored with its dead output features dropped (what the constant_output flag weighs: onnxaff.collection.entries). The
first chunk's half-sample scores are onnxaff.collection.half_samples'."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from onnxaff.collection.chunks import readonly
from onnxaff.foundations.statefields import transient
from onnxaff.metrics import Chunk


@dataclass
class Scores:
    values: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    live: dict[str, list[float]] = field(default_factory=dict)  # spec -> [chunk index, score without dead outputs]
    living: tuple | None = transient(None)  # (future, scorer, chunk index) while those scores are computed

    def store(self, results: list[tuple[str, float | None, str | None]]) -> None:
        """(name, value, error) triples from the scorer: a value is appended, the first error kept."""
        for name, value, error in results:
            if error is not None:
                self.errors.setdefault(name, error)
            else:
                self.values.setdefault(name, []).append(value)

    def submit_live(self, chunk: Chunk, index: int, jobs_of, scorer) -> None:
        """Once a site: its first chunk with constant (dead) output features scored again with them dropped (X's
        matching features too where X and Y pair feature by feature); `jobs_of(chunk)`: the chunk metrics' jobs."""
        if self.live or self.living is not None:
            return
        live = np.ptp(chunk.y, axis=0) > 0
        if live.all() or not live.any():  # none dead; or all: nothing left to score (the flag stays)
            return
        x = chunk.x[:, live] if chunk.x.shape[1] == chunk.y.shape[1] else chunk.x
        if jobs := jobs_of(Chunk(readonly(np.ascontiguousarray(x)), readonly(np.ascontiguousarray(chunk.y[:, live])),
                                 chunk.rounding)):
            self.living = (scorer.submit(jobs), scorer, index)

    def collect_live(self, wait: bool) -> None:
        """The scores without dead outputs, once done (`wait`: waiting for them); a stop leaves them out (the flag
        stays where they are missing)."""
        if self.living is None or (not wait and not self.living[0].done()):
            return
        (future, scorer, index), self.living = self.living, None
        for name, value, error in scorer.results(future) or []:
            if error is None and value is not None:
                self.live[name] = [index, value]

    def merge(self, other: Scores, boundary: list | None = None) -> None:
        """The next slice's scores after these; `boundary`: the scores of the chunk pair straddling the two."""
        for name, (index, value) in other.live.items():  # its chunk index counted from the start of the whole
            self.live.setdefault(name, [index + len(self.values.get(name, [])), value])
        mine = Scores()
        mine.store(boundary or [])
        for name, error in mine.errors.items():
            self.errors.setdefault(name, error)
        for name in {*self.values, *other.values, *mine.values}:
            self.values[name] = self.values.get(name, []) + mine.values.get(name, []) + other.values.get(name, [])
        for name, error in other.errors.items():
            self.errors.setdefault(name, error)
