"""Shards on a distributed engine: one Ray task per shard, merged exactly on the driver.

On a cluster, start Ray on every node (`ray start --head` on one, `ray start --address HEAD:6379` on the
others), make the model, the data and any --plugin file readable at the same absolute path on every
node (a shared filesystem), and pass `--ray-address auto` (or HEAD:6379). Without an address a local
Ray instance is started for the run and stopped after it. Each task asks Ray for one GPU when the
cluster has GPUs and the device is cuda or auto, so tasks spread one per GPU.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from pathlib import Path

import onnxaff
from onnxaff import defaults
from onnxaff.analysis.config import AnalysisConfig
from onnxaff.analysis.lifecycle import open_run
from onnxaff.errors import ConfigError, OnnxaffError, first_line
from onnxaff.format.signature import Signature
from onnxaff.foundations.files import absolute


def _absolute(path: str) -> str:
    """Workers may start elsewhere: a local path travels as an absolute one (synthetic specs as they are)."""
    return str(absolute(path)) if os.path.exists(path) else path


def _config(options: AnalysisConfig | dict) -> AnalysisConfig:
    return options if isinstance(options, AnalysisConfig) else AnalysisConfig(**options)


def shard_state(model: str, data: str, shard: tuple[int, int], options: AnalysisConfig | dict) -> dict:
    """One shard's collector state, the body of a Ray task (also callable in-process)."""
    with open_run(model, data, _config(options).replace(shard=shard, progress=False)) as run:
        run.execute(finish=False)
        return run.part_state()


def _cpus_per_task(ray, shards: int) -> int:
    """An equal share of the cluster's cores, within one node: each task's onnxruntime gets that many threads
    (by default it would take every core of its node, once per task)."""
    nodes = [n["Resources"].get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    total = ray.cluster_resources().get("CPU", 1)
    return max(1, min(int(min(nodes)) if nodes else 1, int(total // shards)))


def _cancel(ray, refs: list, grace_s: float = 1.0) -> None:
    """Stop the shards still running. Ray (2.60 and earlier) aborts the driver when a cancel races a task's
    own completion ("Tried to complete task that was not pending", ray-project/ray#54798), which a model's
    other shards hit when they fail on the same bad input a moment later: those that end within `grace_s`
    are left to end, and only the ones still running are cancelled."""
    if not refs:
        return
    try:  # fetch_local=False: the finished shards' states need not come to the driver to be skipped
        _, running = ray.wait(list(refs), num_returns=len(refs), timeout=grace_s, fetch_local=False)
    except KeyboardInterrupt:  # a second Ctrl-C: no grace, every shard is cancelled
        running = list(refs)
    except Exception:  # the cluster is gone: nothing left to stop
        return
    for ref in running:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # finished already, or the cluster is gone: nothing left to stop
            pass


def _check_reachable(address: str | None, timeout: float = 3.0) -> None:
    """Fail fast on an address nothing listens on: ray.init retries for minutes, printing a wall of GCS
    connection warnings from its C++ core."""
    if address is None or address in ("auto", "local"):
        return
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError("ray_address", f"{{option}} {address!r} is not HOST:PORT, ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise OnnxaffError(f"cannot reach Ray at {address}: {exc.strerror or first_line(exc)} "
                           f"(is `ray start --head` running there?)") from None


@contextlib.contextmanager
def _quiet_ray():
    """Ray's Python loggers at ERROR while it starts: its warnings (the token-authentication banner on every
    local start) are not the user's business here; failures still come back as exceptions."""
    logger = logging.getLogger("ray")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _neutral_cwd():
    """ray.init puts the driver's working directory first on every worker's sys.path, so an `onnxaff` folder
    there would be imported instead of the installed package. It starts from the folder that holds the
    installed package instead (the paths handed to tasks are absolute)."""
    here = os.getcwd()
    os.chdir(Path(onnxaff.__file__).resolve().parents[1])
    try:
        yield
    finally:
        os.chdir(here)


def start_ray(address: str | None) -> bool:
    """Ray started (or reached) once, quietly, from a neutral folder; False when it was running already."""
    try:
        import ray
    except ImportError:
        raise ConfigError("executor", "{option} ray needs Ray: pip install 'onnxaff[ray]'") from None
    if ray.is_initialized():
        return False
    _check_reachable(address)
    try:
        with _quiet_ray(), _neutral_cwd():
            ray.init(address=address, include_dashboard=False, logging_level="ERROR", configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:  # no cluster at that address, a bad address
        raise OnnxaffError(f"cannot start or reach Ray{f' at {address}' if address else ''}: "
                           f"{first_line(exc)}") from None
    return True


def run_ray(model: str, data: str, shards: int, options: AnalysisConfig | dict, address: str | None = None,
            progress: bool = defaults.PROGRESS) -> Signature:
    """Every shard a Ray task, merged on the driver; `options` an AnalysisConfig (or its fields)."""
    try:
        import ray
    except ImportError:
        raise ConfigError("executor", "{option} ray needs Ray: pip install 'onnxaff[ray]'") from None
    from onnxaff.foundations.progress import Progress
    from onnxaff.results.shards import merge_states

    if shards < 1:
        raise ConfigError("shards", f"{{option}} must be positive, got {shards}")
    config = _config(options)
    config = config.replace(plugins=tuple(_absolute(p) for p in config.plugins), progress=False)
    started_here = start_ray(address)
    refs: list = []
    bar = Progress(shards, label="ray", enabled=progress, unit="shards")
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        use_gpu = gpus >= 1 and config.device in ("auto", "cuda")
        cpus = _cpus_per_task(ray, shards)
        task = ray.remote(num_gpus=1 if use_gpu else 0, num_cpus=cpus, max_retries=0)(shard_state)
        images = dict(config.images or {})
        images["workers"] = min(images.get("workers", 0), cpus - 1)  # decoders beside the runtime, in the budget
        task_config = config.replace(threads=cpus, chunk_workers=0, images=images)
        refs = [task.remote(_absolute(model), _absolute(data), (i, shards), task_config) for i in range(shards)]
        waiting = list(refs)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            ray.get(done)  # raise a failed shard's error now
            bar.update(len(done))
        states = ray.get(refs)
    except ray.exceptions.RayTaskError as exc:
        _cancel(ray, refs)
        cause = getattr(exc, "cause", None)
        if isinstance(cause, OnnxaffError):
            raise OnnxaffError(f"a Ray shard failed: {cause.template}") from None
        raise OnnxaffError(f"a Ray shard failed: {type(cause).__name__ if cause else 'error'}: "
                           f"{str(cause or exc).splitlines()[0]}") from None
    except ray.exceptions.RayError as exc:  # a worker died (out of memory, killed), a node was lost
        _cancel(ray, refs)
        raise OnnxaffError(f"a Ray shard was lost: {type(exc).__name__}: {first_line(exc)}") from None
    except BaseException:  # Ctrl-C: on a long-lived cluster the other shards would run on for nothing
        _cancel(ray, refs)
        raise
    finally:
        bar.close()
        if started_here:
            ray.shutdown()
    sig = merge_states(states)
    sig.runtime["executor"] = {"engine": "ray", "ray": ray.__version__, "shards": shards, "gpus_per_task": int(use_gpu),
                               "cpus_per_task": cpus}
    return sig
