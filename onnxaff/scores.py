"""A site's metric scores: each chunk metric's values in chunk order, the first error of each metric, and the
half-sample scores of a run's only chunk."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Scores:
    values: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    halves: dict[str, list[float]] = field(default_factory=dict)

    def store(self, results: list[tuple[str, float | None, str | None]]) -> None:
        """(name, value, error) triples from the scorer: a value is appended, the first error kept."""
        for name, value, error in results:
            if error is not None:
                self.errors.setdefault(name, error)
            else:
                self.values.setdefault(name, []).append(value)

    def store_halves(self, results: list[tuple[str, float | None, str | None]]) -> None:
        for name, value, _ in results:
            if value is not None:
                self.halves.setdefault(name, []).append(value)

    def append(self, other: Scores, boundary: list | None = None) -> None:
        """The next slice's scores after these; `boundary`: the scores of the chunk pair straddling the two."""
        mine = Scores()
        mine.store(boundary or [])
        for name, error in mine.errors.items():
            self.errors.setdefault(name, error)
        for name in {*self.values, *other.values, *mine.values}:
            self.values[name] = self.values.get(name, []) + mine.values.get(name, []) + other.values.get(name, [])
        for name, error in other.errors.items():
            self.errors.setdefault(name, error)
