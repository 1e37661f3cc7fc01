"""Running a study: each model analysed (or skipped, or failed with its reason), then the comparison outputs."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from onnxaff.analysis.checkpoint import is_checkpoint
from onnxaff.analysis.checkpoint import remove as remove_checkpoint
from onnxaff.analysis.reads import data_path
from onnxaff.errors import ConfigError, Interrupted, Message, OnnxaffError, first_line, option
from onnxaff.format.signature import Signature, read_signature, write_json_atomic
from onnxaff.foundations.files import check_writable, exclusive, refuse_overwrite, write_text_atomic
from onnxaff.metrics import registry, resolve
from onnxaff.metrics.loader import code_fingerprints, stage_metrics
from onnxaff.studies.identity import (
    code_identity,
    data_identity,
    effective_options,
    file_digest,
    model_identity,
    options_identity,
    stale_reason,
)
from onnxaff.studies.models import StudyModel
from onnxaff.studies.result import Study
from onnxaff.studies.settings import check_data, groups_of, own_names, preprocessing_column, study_configs

CLUSTERS = 3




def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _analyse(model: StudyModel, data: str, options: dict, checkpoint: Path, every: int, echo) -> Signature:
    """One model's signature: resumed from its checkpoint when one of this very run is there, else started over."""
    from onnxaff.analysis import AnalysisConfig, open_run

    if checkpoint.exists() and not is_checkpoint(checkpoint):  # never replaced: it is someone's file
        raise OnnxaffError(f"{checkpoint} is where the study keeps this model's checkpoint, and holds a file that "
                           "is not one; move it away or label the model otherwise (LABEL=MODEL)")
    with open_run(model.path, data, AnalysisConfig(**options), checkpoint=checkpoint, resume="auto",
                  on_mismatch="restart", echo=lambda line: echo(Message("    " + line.template))) as run:
        run.execute(every, finish=True)  # Ctrl-C during the last scores still saves the model's state
        return run.signature()


def run_study(models: list[StudyModel], data: str | None, out: str | os.PathLike, *, options: dict,
              given: Collection[str] | None = None, accuracy: dict[str, str] | None = None,
              groups: dict[str, str] | None = None, force: bool = False, executor: str = "local", shards: int = 4,
              ray_address: str | None = None, checkpoint_every: int = 0, clusters: int = CLUSTERS,
              echo: Callable[[str], None] | None = None, render=None, strict: bool = False) -> Study:
    """Analyse every model (skipping up-to-date ones), then write report.html and compare.json into `out`.

    `options` are AnalysisConfig fields (metrics first: the first metric heads the tables), checked once before
    any model is read (a bad value is a ConfigError, not a failure of every model). Each model is analysed with
    its own options over them, and `options` over its manifest's `[options]` where `given` (the fields the caller
    set, `images.KEY` for image options; default: every key of `options`) names them (onnxaff.studies.settings).
    `accuracy` and `groups` map a label or a model file's sha256 to a value, over the models' own.
    `render(sigs, comps, corr, rows, metric, failed)` returns the page (default: the study page). Interrupted
    propagates, the state saved. The signatures are compared after a line naming the options that change the
    numbers and differ between them (per-model data or options, signatures of older runs); `strict` refuses that
    comparison instead (the signatures are kept).
    """
    _check_run(models, data, executor, checkpoint_every)
    options, per_model = study_configs(models, options, given)  # every option checked once, before any model
    available = registry(options.get("plugins") or ())
    used = resolve(options["metrics"], available=available)  # and every metric spec
    code = code_identity({**code_fingerprints(used, available),
                          **{name: available[name].fingerprint for name in stage_metrics(available)}})
    _check_data_files(models, data)
    folder = Path(out)
    refuse_overwrite(study_outputs(folder, models), study_inputs(models, data, options, per_model))
    sig_dir = _make_folder(folder / "signatures", folder)
    with exclusive(folder / ".onnxaff-study.lock", f"the study folder {folder}"):
        for _, path in study_outputs(folder, models):
            check_writable(path)  # once, before any model: not after analysing them all
        return _run_locked(models, data, folder, sig_dir, (options, per_model), code, accuracy, groups, force,
                           executor, shards, ray_address, checkpoint_every, clusters, echo, (render, strict))


def _run_locked(models, data, folder, sig_dir, settings, code, accuracy, groups, force, executor, shards,
                ray_address, checkpoint_every, clusters, echo, outputs) -> Study:
    options, per_model = settings
    metrics = options["metrics"]
    digests = {m.label: file_digest(m.path) for m in models}
    accuracies = _accuracies(models, digests, accuracy)
    groups = groups_of(models, digests, groups)
    run = _Run(models, sig_dir, per_model, _plan(models, data, sig_dir, digests, options, code, force, per_model),
               checkpoint_every, force, echo or (lambda line: None))
    started = time.perf_counter()
    with _ray_tasks(run, executor, shards, ray_address) as run.pending:
        for k, model in enumerate(models, 1):
            _study_model(run, k, model)
    shown = preprocessing_column(models, run.sigs) or {}  # where the models' preprocessing differs
    rows = [_row(m, run.sigs[m.label], accuracies.get(m.label), metrics[0], shown.get(m.label))
            for m in models if m.label in run.sigs]
    result = Study(folder, run.sigs, rows, run.failed, run.skipped, metric=metrics[0])
    result.report = _write_outputs(result, models, accuracies, groups, metrics[0], clusters, *outputs, run.echo)
    run.echo(f"{len(run.sigs)} of {len(models)} models in the study ({len(run.skipped)} up to date, "
             f"{len(run.failed)} failed) in {_clock(time.perf_counter() - started)}")
    return result


def study_outputs(folder: Path, models: list[StudyModel]) -> list[tuple[str, Path]]:
    """Every file a study writes, as refuse_overwrite takes them."""
    sig_dir = folder / "signatures"
    return [("the study's compare.json", folder / "compare.json"), ("the study's report.html", folder / "report.html"),
            *[(f"the signature of {m.label}", sig_dir / f"{m.label}.json") for m in models],
            *[(f"the checkpoint of {m.label}", sig_dir / f"{m.label}.ckpt.npz") for m in models]]


def study_inputs(models: list[StudyModel], data: str | None, options: dict,
                 per_model: dict[str, dict] | None = None) -> list[tuple[str, str | Path]]:
    """Every file a study reads (models, data, plugins, each model's constants and tokenizer), as refuse_overwrite
    takes them."""
    specs = {m.data_for(data) for m in models} - {None}
    mine = [(per_model or {}).get(m.label, options) for m in models]
    constants = {(k, v) for o in mine for k, v in (o.get("constants") or {}).items() if isinstance(v, str)}
    tokenizers = {o["tokenizer"] for o in mine if isinstance(o.get("tokenizer"), str)}
    return [*[(f"the model {m.label}", m.path) for m in models], *[("the data", data_path(s)) for s in sorted(specs)],
            *[("the plugin", p) for p in options.get("plugins") or ()],
            *[(f"the constant of {k}", v) for k, v in sorted(constants)],
            *[("the tokenizer", t) for t in sorted(tokenizers)]]


def _check_data_files(models: list[StudyModel], data: str | None) -> None:
    for spec in {m.data_for(data) for m in models} - {None}:
        path = data_path(spec)
        if path is not None and not os.path.exists(path):  # every model would fail alike
            raise OnnxaffError(f"data file not found: {path}")


def _make_folder(sig_dir: Path, folder: Path) -> Path:
    try:
        sig_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OnnxaffError(f"cannot create the study folder {folder}: {exc.strerror}") from None
    return sig_dir


def _check_run(models: list[StudyModel], data: str | None, executor: str, checkpoint_every: int) -> None:
    from onnxaff.analysis.config import check_checkpoint_every

    check_checkpoint_every(checkpoint_every)
    if executor not in ("local", "ray"):
        raise OnnxaffError(f"unknown executor {executor!r}; choose local or ray")
    if executor == "ray" and checkpoint_every:
        raise ConfigError("checkpoint_every", "the ray executor keeps no mid-model checkpoint (a rerun redoes an "
                                              "unfinished model): drop {option}")
    check_data(models, data)


def _plan(models: list[StudyModel], data: str | None, sig_dir: Path, digests: dict, options: dict, code: str,
          force: bool, per_model: dict[str, dict] | None = None) -> dict[str, tuple]:
    """label -> (its data, the identity its signature records, why it must be analysed: None when up to date);
    each model keyed on its own options (`per_model`, else `options`)."""
    data_keys: dict[str, str] = {}
    plan = {}
    for model in models:
        model_data = model.data_for(data)
        if model_data not in data_keys:
            data_keys[model_data] = _data_key(model_data)
        if isinstance(data_keys[model_data], _Unidentified):  # this model fails, the study goes on
            plan[model.label] = (model_data, None, data_keys[model_data])
            continue
        identity = model_identity(model.path) if digests[model.label] is not None else None
        mine = (per_model or {}).get(model.label, options)
        key = {"model_sha256": identity, "data": data_keys[model_data], "options": options_identity(mine),
               "code": code, "option_values": effective_options(mine)}  # the values: what a rerun names
        reason = "unreadable" if identity is None else (
            option("force") if force else stale_reason(sig_dir / f"{model.label}.json", key))
        plan[model.label] = (model_data, key, reason)
    return plan


class _Unidentified(str):
    """Why a model's data could not be identified (a data source's `identity` failed): that model fails."""


def _data_key(spec: str) -> str:
    """data_identity, or _Unidentified naming the kind whose identity failed (an installed one by its entry point)."""
    try:
        return data_identity(spec)
    except Exception as exc:  # a third-party kind's identity: its fault, this model's failure
        from onnxaff.data.registry import find_kind, plugin_name

        found = find_kind(spec)
        who = (found and plugin_name(found[0])) or f"the data {spec}"
        return _Unidentified(f"{who}: identity() failed ({type(exc).__name__}: {first_line(exc)})")


@dataclass
class _Run:
    """A study under way: what to analyse and how, and how each model fared so far."""

    models: list[StudyModel]
    sig_dir: Path
    options: dict[str, dict]  # label -> the options it is analysed with
    plan: dict[str, tuple]
    checkpoint_every: int
    force: bool
    echo: Callable[[str], None]
    pending: dict | None = None  # label -> its Ray future, when the models run on Ray
    sigs: dict[str, Signature] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    analysed: int = 0

    def eta(self, left: int) -> str:
        return f", study ETA {_clock(self.seconds / self.analysed * left)}" if self.analysed and left else ""

    def fail(self, head: str, label: str, reason: str) -> None:
        self.failed[label] = reason
        self.echo(Message(f"{head}: FAILED: {getattr(reason, 'template', reason)}"))


class _ModelFailed(Exception):
    """This model failed (its reason is the message); the study goes on."""


@contextmanager
def _ray_tasks(run: _Run, executor: str, shards: int, ray_address: str | None):
    """On Ray every model to analyse is submitted at once: its shards are tasks, so models run side by side.
    Yields label -> future (None when the models run here), and stops what is left on the way out."""
    if executor != "ray":
        yield None
        return
    from concurrent.futures import ThreadPoolExecutor

    from onnxaff.results.executors import run_ray

    ray_started, pool = _start_ray(ray_address), None
    try:
        todo = [m for m in run.models if run.plan[m.label][2] not in (None, "unreadable") and
                not isinstance(run.plan[m.label][2], _Unidentified)]
        pool = ThreadPoolExecutor(max_workers=max(1, len(todo)), thread_name_prefix="onnxaff-study")
        yield {m.label: pool.submit(run_ray, str(m.path), run.plan[m.label][0], shards, run.options[m.label],
                                    address=ray_address, progress=False) for m in todo}  # run_ray: no bars
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if ray_started:
            import ray

            ray.shutdown()


def _study_model(run: _Run, k: int, model: StudyModel) -> None:
    """Model `k`: skipped when up to date, else analysed (or its Ray result awaited) and its signature written."""
    head = f"[{k}/{len(run.models)}] {model.label}"
    target = run.sig_dir / f"{model.label}.json"
    checkpoint = run.sig_dir / f"{model.label}.ckpt.npz"
    _, key, reason = run.plan[model.label]
    if isinstance(reason, _Unidentified):
        return run.fail(head, model.label, reason)
    if reason == "unreadable":
        why = "" if model.path.is_file() else " (not a regular file)" if model.path.exists() else " (no such file)"
        return run.fail(head, model.label, f"cannot read {model.path}{why}")
    if reason is None:
        run.sigs[model.label] = _label(read_signature(target), model)
        run.skipped.append(model.label)
        remove_checkpoint(checkpoint)  # left by an older run of other options: never resumable
        return run.echo(f"{head}: up to date (same model, data and options), skipped")
    if run.force:
        remove_checkpoint(checkpoint)
    waiting = "waiting for its Ray tasks" if run.pending is not None else "analysing"
    run.echo(Message(f"{head}: {waiting} ({reason}){run.eta(len(run.models) - k + 1)}"))
    t0 = time.perf_counter()
    try:
        sig = _signature_of(run, model, checkpoint)
    except _ModelFailed as exc:
        return run.fail(head, model.label, Message(exc))
    sig.runtime["study"] = key
    try:
        _label(sig, model).write(target)
    except OnnxaffError as exc:  # a full disk fails this model, as any error of its own would
        return run.fail(head, model.label, Message(exc))
    remove_checkpoint(checkpoint)  # only an onnxaff checkpoint is ever removed
    run.sigs[model.label] = sig
    seconds = time.perf_counter() - t0
    run.seconds, run.analysed = run.seconds + seconds, run.analysed + 1
    metric = run.options[model.label]["metrics"][0]
    stats = sig.summary().get(metric, {})
    mean = f", {metric} mean {stats['mean']:.4f}" if stats.get("mean") is not None else ""
    run.echo(f"{head}: done in {seconds:.1f} s ({len(sig.sites)} sites{mean}){run.eta(len(run.models) - k)}")


def _signature_of(run: _Run, model: StudyModel, checkpoint: Path) -> Signature:
    """The model's new signature; its own errors (onnxruntime's too) become _ModelFailed, Ctrl-C propagates."""
    try:
        if run.pending is not None:
            return run.pending[model.label].result()
        return _analyse(model, run.plan[model.label][0], run.options[model.label], checkpoint, run.checkpoint_every,
                        run.echo)
    except Interrupted as exc:
        raise Interrupted(f"{model.label}: {exc.template.split(' (continue with')[0]}; rerun the same command "
                          "to continue (models done are kept)") from None
    except (KeyboardInterrupt, MemoryError):
        raise
    except OnnxaffError as exc:
        raise _ModelFailed(own_names(model, exc.template)) from None
    except Exception as exc:  # onnxruntime's own errors (unsupported operator, ...) are this model's
        raise _ModelFailed(f"{type(exc).__name__}: {first_line(exc)}") from None


def _start_ray(address: str | None) -> bool:
    """One Ray instance for the whole study (each model's shards are its tasks), not one per model; started as
    `analyze --executor ray` starts it (the installed package on the workers, a bad address in one line)."""
    from onnxaff.results.executors import start_ray

    return start_ray(address)


def _accuracies(models: list[StudyModel], digests: dict, table: dict[str, str] | None) -> dict[str, float]:
    """Each model's accuracy (the table's by label or file sha256, else its own), checked before any analysis."""
    from onnxaff.results.comparison import accuracy_value  # scipy only when a table is read

    out = {m.label: m.accuracy for m in models if m.accuracy is not None}
    if table is None:
        return out
    for m in models:
        key = next((k for k in (m.label, digests.get(m.label)) if k is not None and k in table), None)
        if key is None and m.accuracy is not None:
            continue
        if key is None:
            raise OnnxaffError(f"the accuracy file has no row for {m.label} (by label or sha256)")
        out[m.label] = accuracy_value(m.label, table[key])
    return out


def _label(sig: Signature, model: StudyModel) -> Signature:
    sig.model["name"] = model.label  # the study's label, not the file stem, names the model in reports
    sig.model.update(model.model_info)
    return sig


def _row(model: StudyModel, sig: Signature, accuracy: float | None, metric: str, preprocessing: str | None) -> dict:
    stats = sig.summary().get(metric, {})
    flags = {m: sig.flag_summary(m) for m in sig.metrics if any(v is not None for v in sig.scores(m))}
    shown = {} if preprocessing is None else {"preprocessing": preprocessing}
    return {"model": model.label, **model.columns, **shown, "sites": len(sig.sites), "accuracy": accuracy,
            "mean": stats.get("mean"), "min": stats.get("min"), "share_above_0.95": stats.get("share_above_0.95"),
            "flags": flags, "mostly_flagged": sig.mostly_flagged(metric)}


def _write_outputs(result: Study, models: list[StudyModel], accuracies: dict, groups, metric: str,
                   clusters: int, render, strict: bool, echo) -> Path:
    from onnxaff.reports.jsondata import comparison_metrics
    from onnxaff.results.comparison import compare, correlate, run_labels, shared_metrics
    from onnxaff.results.differences import differences, differences_line, refuse

    ordered = [result.signatures[m.label] for m in models if m.label in result.signatures]
    comps, corr = [], None
    diffs = differences(ordered, shared_metrics(ordered)) if len(ordered) >= 2 else []
    if strict:
        refuse(diffs, run_labels(ordered))
    if diffs:
        echo(differences_line(diffs, run_labels(ordered)))
    if len(ordered) >= 2:
        comps = [compare(ordered, metric=m) for m in shared_metrics(ordered)]
        distinct = [m for m in models if m.label in result.signatures and m.correlate and m.label in accuracies]
        if len(distinct) >= 3:
            corr = correlate([result.signatures[m.label] for m in distinct],
                             {m.label: str(accuracies[m.label]) for m in distinct}, metric=metric, groups=groups)
            for line in corr["warnings"]:  # its differences: said above
                echo(line)
    payload = {"models": [m.label for m in models if m.label in result.signatures], "failed": result.failed,
               "skipped": result.skipped, "normalized": False, "metrics": comparison_metrics(comps, clusters),
               "differences": [d.as_dict(run_labels(ordered)) for d in diffs]}
    if corr is not None:
        payload["correlation"] = {k: corr[k] for k in ("metric", "table", "p_method", "interval_method", "warnings")}
    write_json_atomic(result.folder / "compare.json", payload)
    if render is None:
        from onnxaff.reports.study import study_page

        page = study_page(ordered, comps, corr, result.rows, metric, result.failed, clusters)
    else:
        page = render(ordered, comps, corr, result.rows, metric, result.failed)
    return write_text_atomic(result.folder / "report.html", page)
