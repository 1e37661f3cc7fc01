"""A study: many models analysed on the same data, then compared (DTW, clustering) and correlated with accuracy.

The unit of work is one model. Its signature is written to `DIR/signatures/<label>.json` with the identity
of what produced it (model file hash, data, options), so a rerun skips a model whose signature is up to
date, continues a model that was interrupted from its checkpoint (`DIR/signatures/<label>.ckpt.npz`),
and only re-renders the report. A model that fails (unreadable file, unsupported operator, data that does
not fit it) is recorded with its one-line reason and the others go on. `onnxaff demo` is a study of the
shipped models.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from onnxaff.analysis.checkpoint import remove as remove_checkpoint
from onnxaff.errors import Interrupted, OnnxaffError, first_line
from onnxaff.files import write_text_atomic
from onnxaff.metrics import default_metrics, registry
from onnxaff.signature import Signature, read_signature, write_json_atomic

LABEL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
# Options that change how fast a run goes, never its numbers: a signature made with others is still current.
_SPEED_ONLY = ("progress", "device", "chunk_workers", "threads")
CLUSTERS = 3


@dataclass
class StudyModel:
    """One model of a study: its label (file name of its signature), file, and optionally its own data."""

    label: str
    path: Path
    data: str | None = None  # None: the study's data
    accuracy: float | None = None
    columns: dict = field(default_factory=dict)  # extra table columns, after the label (framework, ...)
    model_info: dict = field(default_factory=dict)  # merged into the signature's `model`
    correlate: bool = True  # False: a second export of weights another model has (counted once)


@dataclass
class StudyResult:
    """Where the study wrote and how each model fared."""

    folder: Path
    signatures: dict[str, Signature]
    rows: list[dict]
    failed: dict[str, str]
    skipped: list[str]
    report: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.failed


# --- which models -------------------------------------------------------------------------------------

def _check_label(label: str, where: str) -> str:
    if not LABEL.match(label):
        raise OnnxaffError(f"model label {label!r} ({where}) must be letters, digits and _ . + - "
                           "(it names the signature file); give one as LABEL=MODEL")
    return label


def _from_list(path: Path) -> list[tuple[str, Path]]:
    """A text file with one model a line (PATH or LABEL=PATH, relative to the file; # comments)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise OnnxaffError(f"cannot read the model list {path}: {getattr(exc, 'strerror', None) or exc}") from None
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            label, eq, rest = line.partition("=")
            target = Path(rest if eq else line)
            target = target if target.is_absolute() else path.parent / target
            out.append((label.strip() if eq else target.stem, target))
    if not out:
        raise OnnxaffError(f"the model list {path} names no model")
    return out


def resolve_models(specs: list[str]) -> list[StudyModel]:
    """MODEL, LABEL=MODEL, a folder (every .onnx in it, recursively) or a text file listing models."""
    found: list[tuple[str, Path, str]] = []
    for spec in specs:
        label, eq, rest = spec.partition("=")
        if eq and label and not os.path.exists(spec):
            found.append((label, Path(rest), spec))
            continue
        path = Path(spec)
        if path.is_dir():
            files = sorted(path.rglob("*.onnx"))
            if not files:
                raise OnnxaffError(f"no .onnx file in the folder {path}")
            found += [(f.stem, f, spec) for f in files]
        elif path.is_file() and path.suffix.lower() in (".txt", ".list", ".lst"):
            found += [(lab, p, spec) for lab, p in _from_list(path)]
        else:
            found.append((path.stem, path, spec))  # a missing file fails as that model, not the study
    models, seen = [], {}
    for label, path, spec in found:
        _check_label(label, spec)
        if label in seen:
            raise OnnxaffError(f"two models are labelled {label!r} ({seen[label]} and {path}); "
                               "label them apart with LABEL=MODEL")
        seen[label] = path
        models.append(StudyModel(label, path))
    if not models:
        raise OnnxaffError("the study names no model")
    return models


# --- what a signature was made from ---------------------------------------------------------------------

def _file_digest(path: Path) -> str | None:
    from onnxaff.graph.load import sha256_of

    try:
        return sha256_of(path)
    except OSError:
        return None


def data_identity(spec: str) -> str:
    """A digest of the data a spec names: a file by path, size and time; a folder by every file's; else the spec."""
    path = Path(spec)
    if path.is_file():
        st = path.stat()
        parts = [str(path.resolve()), st.st_size, st.st_mtime_ns]
    elif path.is_dir():
        parts = [str(path.resolve())]
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            st = f.stat()
            parts.append([f.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns])
    else:
        parts = [spec]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def options_identity(options: dict) -> str:
    """A digest of the options that change numbers (plugin files by content)."""
    numeric = {k: v for k, v in options.items() if k not in _SPEED_ONLY}
    if "images" in numeric:
        numeric["images"] = {k: v for k, v in (numeric["images"] or {}).items() if k != "workers"}
    numeric["plugins"] = [[str(p), _file_digest(Path(p))] for p in numeric.get("plugins", [])]
    return hashlib.sha256(json.dumps(numeric, sort_keys=True, default=str).encode()).hexdigest()


def _stale_reason(path: Path, key: dict) -> str | None:
    """None when the signature at `path` was made from this very model, data and options; else why not."""
    if not path.exists():
        return "no signature yet"
    try:
        sig = read_signature(path)
    except OnnxaffError as exc:
        return f"its signature is unreadable ({exc})"
    made = sig.runtime.get("study") or {}
    for field_, what in (("model_sha256", "the model file changed"), ("data", "the data changed"),
                         ("options", "the options changed")):
        if made.get(field_) != key[field_]:
            return what
    return None


# --- the run ------------------------------------------------------------------------------------------

def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _analyse(model: StudyModel, data: str, options: dict, checkpoint: Path, every: int, echo) -> Signature:
    """One model's signature: resumed from its checkpoint when one of this very run is there."""
    from onnxaff.analysis import Analysis, AnalysisConfig

    config = AnalysisConfig(**options)
    run = Analysis(model.path, data, config)
    if checkpoint.exists():
        try:
            run.restore(checkpoint)
            echo(f"    continuing from {checkpoint.name} ({run.cursor - run.start} of {run.stop - run.start} "
                 f"examples done)")
        except OnnxaffError as exc:
            echo(f"    not continuing {checkpoint.name}: {exc}; starting over")
            run = Analysis(model.path, data, config)
    run.run(checkpoint, every, finish=True)  # Ctrl-C during the last scores still saves the model's state
    return run.signature()


def run_study(models: list[StudyModel], data: str | None, out: str | os.PathLike, *, options: dict,
              accuracy: dict[str, str] | None = None, groups: dict[str, str] | None = None, force: bool = False,
              executor: str = "local", shards: int = 4, ray_address: str | None = None, checkpoint_every: int = 0,
              clusters: int = CLUSTERS, echo: Callable[[str], None] | None = None, render=None) -> StudyResult:
    """Analyse every model (skipping up-to-date ones), then write report.html and compare.json into `out`.

    `options` are Analysis's keyword options (metrics first: the first metric heads the tables). `accuracy`
    and `groups` map a label or a model file's sha256 to a value. `render(sigs, comps, corr, rows, metric,
    failed)` returns the page (default: the study page). Interrupted propagates, the state saved.
    """
    echo = echo or (lambda line: None)
    for spec in {m.data or data for m in models} - {None}:
        if not spec.startswith("synthetic:") and not os.path.exists(spec):  # every model would fail alike
            raise OnnxaffError(f"data file not found: {spec}")
    folder = Path(out)
    sig_dir = folder / "signatures"
    try:
        sig_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OnnxaffError(f"cannot create the study folder {folder}: {exc.strerror}") from None
    if checkpoint_every < 0:
        raise OnnxaffError(f"--checkpoint-every must be 0 or positive, got {checkpoint_every}")
    if executor not in ("local", "ray"):
        raise OnnxaffError(f"unknown executor {executor!r}; choose local or ray")
    if executor == "ray" and checkpoint_every:
        raise OnnxaffError("--executor ray keeps no mid-model checkpoint (a rerun redoes an unfinished model): "
                           "drop --checkpoint-every")
    if data is None and any(m.data is None for m in models):
        raise OnnxaffError("the study needs data: give --data")
    metrics = list(options.get("metrics") or default_metrics(registry(options.get("plugins") or ())))
    options = {**options, "metrics": metrics}
    digests = {m.label: _file_digest(m.path) for m in models}
    accuracies = _accuracies(models, digests, accuracy)
    opt_key = options_identity(options)
    data_keys: dict[str, str] = {}

    sigs: dict[str, Signature] = {}
    failed: dict[str, str] = {}
    skipped: list[str] = []
    started, analysed_seconds, analysed = time.perf_counter(), 0.0, 0
    plan = {}  # label -> (data, key, why it must be analysed: None when its signature is up to date)
    for model in models:
        model_data = model.data or data
        if model_data not in data_keys:
            data_keys[model_data] = data_identity(model_data)
        key = {"model_sha256": digests[model.label], "data": data_keys[model_data], "options": opt_key}
        reason = "unreadable" if digests[model.label] is None else (
            "--force" if force else _stale_reason(sig_dir / f"{model.label}.json", key))
        plan[model.label] = (model_data, key, reason)
    ray_started = _start_ray(ray_address) if executor == "ray" else False
    # On Ray every model to analyse is submitted at once: its shards are tasks, so models run side by side.
    pool, pending = None, {}
    if executor == "ray":
        from concurrent.futures import ThreadPoolExecutor

        from onnxaff.executors import run_ray

        todo = [m for m in models if plan[m.label][2] not in (None, "unreadable")]
        pool = ThreadPoolExecutor(max_workers=max(1, len(todo)), thread_name_prefix="onnxaff-study")
        quiet_options = {k: v for k, v in options.items() if k != "progress"}
        pending = {m.label: pool.submit(run_ray, str(m.path), plan[m.label][0], shards, quiet_options,
                                        address=ray_address, progress=False) for m in todo}
    try:
        for k, model in enumerate(models, 1):
            head = f"[{k}/{len(models)}] {model.label}"
            target = sig_dir / f"{model.label}.json"
            checkpoint = sig_dir / f"{model.label}.ckpt.npz"
            model_data, key, reason = plan[model.label]
            if reason == "unreadable":
                failed[model.label] = f"cannot read {model.path}" + ("" if model.path.exists() else " (no such file)")
                echo(f"{head}: FAILED: {failed[model.label]}")
                continue
            if reason is None:
                sigs[model.label] = _label(read_signature(target), model)
                skipped.append(model.label)
                remove_checkpoint(checkpoint)  # left by an older run of other options: never resumable
                echo(f"{head}: up to date (same model, data and options), skipped")
                continue
            if force:
                remove_checkpoint(checkpoint)
            remaining = len(models) - k + 1
            eta = f", study ETA {_clock(analysed_seconds / analysed * remaining)}" if analysed else ""
            echo(f"{head}: {'waiting for its Ray tasks' if pool else 'analysing'} ({reason}){eta}")
            t0 = time.perf_counter()
            try:
                if pool is not None:
                    sig = pending[model.label].result()
                else:
                    sig = _analyse(model, model_data, options, checkpoint, checkpoint_every, echo)
            except Interrupted as exc:
                raise Interrupted(f"{model.label}: {str(exc).split(' (continue with')[0]}; rerun the same command "
                                  "to continue (models done are kept)") from None
            except (KeyboardInterrupt, MemoryError):
                raise
            except OnnxaffError as exc:
                failed[model.label] = str(exc)
            except Exception as exc:  # onnxruntime's own errors (unsupported operator, ...) are this model's
                failed[model.label] = f"{type(exc).__name__}: {first_line(exc)}"
            if model.label in failed:
                echo(f"{head}: FAILED: {failed[model.label]}")
                continue
            sig.runtime["study"] = key
            _label(sig, model)
            try:
                sig.write(target)
            except OnnxaffError as exc:  # a full disk fails this model, as any error of its own would
                failed[model.label] = str(exc)
                echo(f"{head}: FAILED: {failed[model.label]}")
                continue
            remove_checkpoint(checkpoint)  # only an onnxaff checkpoint is ever removed
            sigs[model.label] = sig
            seconds = time.perf_counter() - t0
            analysed_seconds += seconds
            analysed += 1
            left = len(models) - k
            stats = sig.summary().get(metrics[0], {})
            mean = f", {metrics[0]} mean {stats['mean']:.4f}" if stats.get("mean") is not None else ""
            eta = f", study ETA {_clock(analysed_seconds / analysed * left)}" if left else ""
            echo(f"{head}: done in {seconds:.1f} s ({len(sig.sites)} sites{mean}){eta}")
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if ray_started:
            import ray

            ray.shutdown()
    rows = [_row(m, sigs[m.label], accuracies.get(m.label), metrics[0]) for m in models if m.label in sigs]
    result = StudyResult(folder, sigs, rows, failed, skipped)
    result.report = _write_outputs(result, models, accuracies, groups, metrics[0], clusters, render)
    echo(f"{len(sigs)} of {len(models)} models in the study ({len(skipped)} up to date, {len(failed)} failed) "
         f"in {_clock(time.perf_counter() - started)}")
    return result


def _start_ray(address: str | None) -> bool:
    """One Ray instance for the whole study (each model's shards are its tasks), not one per model; started as
    `analyze --executor ray` starts it (the installed package on the workers, a bad address in one line)."""
    from onnxaff.executors import start_ray

    return start_ray(address)


def _accuracies(models: list[StudyModel], digests: dict, table: dict[str, str] | None) -> dict[str, float]:
    """Each model's accuracy (its own, or the table's by label or file sha256), checked before any analysis."""
    out = {m.label: m.accuracy for m in models if m.accuracy is not None}
    if table is None:
        return out
    for m in models:
        key = next((k for k in (m.label, digests.get(m.label)) if k is not None and k in table), None)
        if key is None:
            raise OnnxaffError(f"the accuracy file has no row for {m.label} (by label or sha256)")
        try:
            out[m.label] = float(table[key])
        except ValueError:
            raise OnnxaffError(f"accuracy of {m.label} is not a number: {table[key]!r}") from None
    return out


def _label(sig: Signature, model: StudyModel) -> Signature:
    sig.model["name"] = model.label  # the study's label, not the file stem, names the model in reports
    sig.model.update(model.model_info)
    return sig


def _row(model: StudyModel, sig: Signature, accuracy: float | None, metric: str) -> dict:
    stats = sig.summary().get(metric, {})
    return {"model": model.label, **model.columns, "sites": len(sig.sites), "accuracy": accuracy,
            "mean": stats.get("mean"), "min": stats.get("min"), "share_above_0.95": stats.get("share_above_0.95")}


def _write_outputs(result: StudyResult, models: list[StudyModel], accuracies: dict, groups, metric: str,
                   clusters: int, render) -> Path:
    from onnxaff.compare import compare, correlate, shared_metrics

    ordered = [result.signatures[m.label] for m in models if m.label in result.signatures]
    comps, corr = [], None
    if len(ordered) >= 2:
        comps = [compare(ordered, metric=m) for m in shared_metrics(ordered)]
        distinct = [m for m in models if m.label in result.signatures and m.correlate and m.label in accuracies]
        if len(distinct) >= 3:
            corr = correlate([result.signatures[m.label] for m in distinct],
                             {m.label: str(accuracies[m.label]) for m in distinct}, metric=metric, groups=groups)
    payload = {"models": [m.label for m in models if m.label in result.signatures], "failed": result.failed,
               "skipped": result.skipped, "normalized": False, "metrics": {
                   c.metric: {"dtw": c.distances.tolist(), "order": c.order, "clusters": c.clusters(clusters),
                              "neighbours": c.neighbours()} for c in comps}}
    if corr is not None:
        payload["correlation"] = {"metric": corr["metric"], "table": corr["table"]}
    write_json_atomic(result.folder / "compare.json", payload)
    if render is None:
        from onnxaff.report.study import study_page

        page = study_page(ordered, comps, corr, result.rows, metric, result.failed, clusters)
    else:
        page = render(ordered, comps, corr, result.rows, metric, result.failed)
    return write_text_atomic(result.folder / "report.html", page)
