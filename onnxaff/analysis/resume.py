"""The one resume path of a run: its checkpoint continued, refused, or started over, as `resume` and
`on_mismatch` say (every run, the CLI's, the API's and a study's, opens through it: onnxaff.analysis.lifecycle)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from onnxaff.analysis.checkpoint import NotThisRun, check_resumable, load_state
from onnxaff.analysis.feeder import Feeder
from onnxaff.errors import OnnxaffError, option


@dataclass
class Resume:
    """A run's checkpoint (None: the run keeps none) and the feeder whose state a saved one replaces."""

    checkpoint: Path | None
    feeder: Feeder

    def apply(self, resume: str, on_mismatch: str, echo: Callable[[str], None], warn: Callable[[str], None]) -> None:
        """Continue the checkpoint of this very run (resume "auto"/"always"), or say why not and start over."""
        path = self.checkpoint
        if path is None or resume == "never":
            if path is not None and path.exists():
                warn(f"{path} holds an interrupted run; starting over replaces it ({option('resume')} continues it)")
            return
        if not path.exists():
            if resume == "always":
                raise OnnxaffError(f"no checkpoint to resume at {path}")
            return
        try:
            self.take(path)
        except OnnxaffError as exc:
            if on_mismatch == "refuse":
                raise
            why = exc.why if isinstance(exc, NotThisRun) else exc.template
            echo(f"not continuing {path.name} ({why}); starting over")
            return
        st = self.feeder.state
        echo(f"continuing from {path.name} ({st.cursor - st.start} of {st.stop - st.start} examples done)")

    def take(self, path: Path) -> None:
        """The saved state of `path` in place of the feeder's, once it is this run's (check_resumable)."""
        saved = load_state(path)
        check_resumable(path, self.feeder.state.key, saved)
        try:
            self.feeder.take(saved, f"checkpoint {path}")
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # edited or mixed files
            raise OnnxaffError(f"checkpoint {path} is damaged ({type(exc).__name__}: {exc})") from None
