"""Shard parts: write one next to its signature, read them back, and merge all n into one run's signature.

A part is the collector state of one shard saved before anything is finished (no partial chunk scored,
no pooled metric computed), so merging states and then finishing once is exactly what one run does.
"""

from __future__ import annotations

from pathlib import Path

from onnxaff.analysis.checkpoint import STATE_KIND_PART, load_state, save_state
from onnxaff.analysis.lifecycle import Run
from onnxaff.analysis.runstate import RunState
from onnxaff.collection.scoring import MetricScorer
from onnxaff.errors import OnnxaffError, option
from onnxaff.format.schema import load_json, validate
from onnxaff.format.signature import Signature
from onnxaff.graph.load import sha256_of


def state_path_for(out: str | Path) -> Path:
    """PART.json -> PART.state.npz beside it."""
    out = Path(out)
    return out.with_name((out.stem if out.suffix == ".json" else out.name) + ".state.npz")


def write_part(run: Run, out: str | Path) -> tuple[Path, Signature]:
    """The shard's collector state, then its own (finished) signature pointing at it."""
    state_file = save_state(state_path_for(out), run.part_state())
    sig = run.signature()
    sig.data["shard"].update(state=state_file.name, state_sha256=sha256_of(state_file))
    return sig.write(out), sig


def part_files(path: str | Path) -> list[Path]:
    """The files of a part as given: PART.json and the state file it names (or the .state.npz alone)."""
    path = Path(path)
    files = [path]
    if path.suffix != ".npz":
        try:  # load_json: a FIFO is refused, not waited on; JSON nested too deeply is an error, not a crash
            state = load_json(path, "part")["data"]["shard"]["state"]
            files.append(path.parent / state)
        except (OnnxaffError, KeyError, TypeError):
            pass  # not a part: read_part says so
    return files


def read_part(path: str | Path) -> dict:
    """A part's state, from PART.json (whose shard entry names the state file) or the .state.npz itself."""
    path = Path(path)
    if path.suffix == ".npz":
        state = load_state(path)
    else:
        shard = read_part_entry(path)
        state_file = path.parent / shard["state"]
        if not state_file.is_file():
            raise OnnxaffError(f"{path}: its state file {state_file} is missing")
        if sha256_of(state_file) != shard.get("state_sha256"):
            raise OnnxaffError(f"{path}: its state file {state_file} has changed since the part was written")
        state = load_state(state_file)
    if state.get("kind") != STATE_KIND_PART:
        raise OnnxaffError(f"{path} is a checkpoint, not a shard part")
    return state


def read_part_entry(path: Path) -> dict:
    """The `data.shard` entry of a part's signature JSON, the whole file checked as a signature first."""
    d = load_json(path, "part")
    validate(d, str(path))
    shard = d["data"].get("shard")
    if shard is None or (isinstance(shard, dict) and "state" not in shard):
        raise OnnxaffError(f"{path} is not a shard part (an analysis with {option('shard', 'i/n')} writes one)")
    if not isinstance(shard, dict):
        raise OnnxaffError(f"{path}: data.shard: expected an object")
    state = shard["state"]
    if not isinstance(state, str) or not state or state != Path(state).name or state in (".", ".."):
        raise OnnxaffError(f"{path}: data.shard.state: expected the name of a file beside the part")
    if not isinstance(shard.get("state_sha256"), str):
        raise OnnxaffError(f"{path}: data.shard.state_sha256: expected text")
    return shard


def merge_states(parts: list[dict]) -> Signature:
    """Exactly one run's signature from the states of all n shards of it (any order given)."""
    if not parts:
        raise OnnxaffError("nothing to merge")
    if any(p["shard"] is None for p in parts):
        raise OnnxaffError("a part without a shard cannot be merged")
    n = parts[0]["shard"][1]
    found = sorted(p["shard"][0] for p in parts)
    if any(p["shard"][1] != n for p in parts):
        raise OnnxaffError("parts come from different shard counts")
    if found != list(range(n)):
        missing = sorted(set(range(n)) - set(found))
        twice = sorted({i for i in found if found.count(i) > 1})
        detail = [f"missing {', '.join(f'{i}/{n}' for i in missing)}"] if missing else []
        detail += [f"given twice: {', '.join(f'{i}/{n}' for i in twice)}"] if twice else []
        raise OnnxaffError(f"a merge needs every shard of {n} exactly once: {'; '.join(detail)}")
    states = [RunState.from_state(p) for p in sorted(parts, key=lambda p: p["shard"][0])]
    total = states[0]
    metrics, track_metrics = total.metrics()
    with MetricScorer(0) as scorer:
        for part in states[1:]:
            total.merge(part, metrics, track_metrics, scorer)
        sig = total.to_signature(metrics, track_metrics, scorer)
    if total.used == 0:
        raise OnnxaffError("the merged parts hold no usable example")
    return sig


def merge_parts(paths: list[str | Path]) -> Signature:
    return merge_states([read_part(p) for p in paths])
