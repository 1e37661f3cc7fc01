"""Shard parts: write one next to its signature, and merge several into one run's signature.

A part is the collector state of one shard saved before anything is finished (no partial chunk scored,
no pooled metric computed), so merging states and then finishing once is exactly what one run does.
"""

from __future__ import annotations

from pathlib import Path

from onnxaff.analysis import STATE_KIND_PART, Analysis, assemble, stage_results
from onnxaff.dispatch import serving
from onnxaff.errors import OnnxaffError
from onnxaff.graph.load import sha256_of
from onnxaff.metrics import registry, resolve
from onnxaff.network import merge_nlc_states, network_results
from onnxaff.schema import load_json, validate
from onnxaff.scoring import ChunkScorer
from onnxaff.signature import Signature
from onnxaff.site_state import SiteState
from onnxaff.state import load_state, save_state


def state_path_for(out: str | Path) -> Path:
    """PART.json -> PART.state.npz beside it."""
    out = Path(out)
    return out.with_name((out.stem if out.suffix == ".json" else out.name) + ".state.npz")


def write_part(run: Analysis, out: str | Path) -> tuple[Path, Signature]:
    """The shard's collector state, then its own (finished) signature pointing at it."""
    state_file = save_state(state_path_for(out), run.state(STATE_KIND_PART))
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
        raise OnnxaffError(f"{path} is not a shard part (run `onnxaff analyze ... --shard i/n`)")
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
    first = parts[0]
    if first["shard"] is None:
        raise OnnxaffError("a part without a shard cannot be merged")
    n = first["shard"][1]
    for p in parts[1:]:
        for field_, what in (("model_sha256", "models"), ("data_sha256", "data"), ("options", "options"),
                             ("total", "data")):
            if p["key"][field_] != first["key"][field_]:
                raise OnnxaffError(f"parts come from different {what}: they cannot be merged")
        if p["shard"] is None or p["shard"][1] != n:
            raise OnnxaffError("parts come from different shard counts")
    found = sorted(p["shard"][0] for p in parts)
    if found != list(range(n)):
        missing = sorted(set(range(n)) - set(found))
        twice = sorted({i for i in found if found.count(i) > 1})
        detail = [f"missing {', '.join(f'{i}/{n}' for i in missing)}"] if missing else []
        detail += [f"given twice: {', '.join(f'{i}/{n}' for i in twice)}"] if twice else []
        raise OnnxaffError(f"a merge needs every shard of {n} exactly once: {'; '.join(detail)}")
    parts = sorted(parts, key=lambda p: p["shard"][0])
    first = parts[0]
    header = first["signature"]
    options = header["options"]
    metrics = [m for m in resolve(options["metrics"], available=registry(options["plugins"])) if not serving(m).stage]
    with ChunkScorer(0) as scorer:
        merged = [SiteState.from_state(d) for d in first["sites"]]
        for p in parts[1:]:
            for st, d in zip(merged, p["sites"], strict=True):
                st.merge(SiteState.from_state(d), metrics, scorer)
        for st in merged:
            st.finish(metrics, scorer)
    track_metrics = resolve([n for n in first["signature"]["metrics"] if n not in {m.name for m in metrics}],
                            available=registry(options["plugins"]))
    with ChunkScorer(0) as scorer:
        stages = [SiteState.from_state(d) for d in first["stages"]]
        for p in parts[1:]:
            for st, d in zip(stages, p["stages"], strict=True):
                st.merge(SiteState.from_state(d), track_metrics, scorer)
        for st in stages:
            st.finish(track_metrics, scorer)
    states = {d["index"]: st for d, st in zip(first["sites"], merged, strict=True)}

    data = dict(header["data"])
    data.pop("shard", None)
    data.update(samples=sum(p["used"] for p in parts), dropped=sum(p["dropped"] for p in parts),
                merged_from={"shards": n, "windows": [[p["start"], p["stop"]] for p in parts]})
    if "skipped" in data:
        root = Path(data["source"])
        data["skipped"] = [{"file": Path(f).relative_to(root).as_posix(), "reason": r}
                           for p in parts for f, r in p["skipped"]]
    seconds = sum(p["seconds"] for p in parts)
    runtime = dict(header["runtime"], seconds=round(seconds, 3), seconds_is="sum over the shards",
                   samples_per_second=round(data["samples"] / seconds, 2) if seconds > 0 else None)
    network = {}
    if first["network"] is not None:
        network = network_results(merge_nlc_states([p["network"] for p in parts]), metrics)
    sig = assemble({**header, "data": data, "runtime": runtime}, first["sites_base"], states, metrics, network)
    ragged = [f"{p['shard'][0]}/{n}" for p in parts[:-1]
              if any(d["buffer"]["x"] is not None for d in p["sites"])]
    if ragged:  # unreadable files or a fixed batch size left a part short of a chunk boundary
        sig.warnings.append(f"shard(s) {', '.join(ragged)} ended between chunk boundaries (unreadable files or "
                            f"dropped batches): the merged chunks there differ from one run's")
    sig.stages = stage_results(first["stages_base"], stages, track_metrics)
    if data["samples"] == 0:
        raise OnnxaffError("the merged parts hold no usable example")
    return sig


def merge_parts(paths: list[str | Path]) -> Signature:
    return merge_states([read_part(p) for p in paths])
