"""Shared helpers: models written inline in ONNX text format, run in onnxruntime, and the one way to run the CLI.

`run_cli` runs `onnxaff` in this process (no interpreter start: the default); `cli_process`/`start_cli` start
`python -m onnxaff.cli` only where a test needs its own process. Model builders live in tests/builders.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def _shared_models() -> Path:
    """The larger pretrained models: ONNXAFF_SHARED_MODELS where set, else the `shared/models` beside this checkout
    (or above it: a worktree of it); every test that reads them takes this one path."""
    if os.environ.get("ONNXAFF_SHARED_MODELS"):
        return Path(os.environ["ONNXAFF_SHARED_MODELS"])
    here = Path(__file__).resolve().parents[2]
    return next((p / "shared" / "models" for p in (here, *here.parents) if (p / "shared" / "models").is_dir()),
                here / "shared" / "models")


SHARED_MODELS = _shared_models()
LIGHT_MODELS = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
# What tests/fixtures/build_fixtures.py wrote about each PyTorch fixture (its site kinds, its blocks): read once.
TORCH_FIXTURES = json.loads((FIXTURES / "torch_fixtures.json").read_text())


def pytest_collection_modifyitems(config, items):
    """Tests marked `slow` (minutes or gigabytes) run only with ONNXAFF_SLOW=1."""
    if os.environ.get("ONNXAFF_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set ONNXAFF_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _signal_handlers_put_back():
    """A test that leaves SIGINT or SIGTERM handled otherwise than it found them breaks the tests after it
    (an interrupted run restores the handlers it found): it fails here, by name."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    after = {sig: signal.getsignal(sig) for sig in before}
    for sig in before:  # put back first, so one leak does not fail every later test
        signal.signal(sig, before[sig] if before[sig] is not None else signal.SIG_DFL)
    assert after == before, f"signal handlers left changed: {after} (were {before})"


@pytest.fixture(scope="session")
def shipped_demo(tmp_path_factory) -> Path:
    """The folder of one `onnxaff demo` of every shipped network, shared by the tests that read its scores
    (tests/test_models.py, the golden numbers' demo runs) instead of an analysis of each per test file."""
    from onnxaff.studies.demo import run_demo

    return run_demo(tmp_path_factory.mktemp("demo") / "demo", progress=False).folder


REQUIRED_MODULES = set(filter(None, os.environ.get("ONNXAFF_REQUIRE", "").split(",")))


def need(module: str):
    """pytest.importorskip, except for the modules ONNXAFF_REQUIRE names (.ci/run: torch): a test that would
    skip for want of one fails instead, so CI runs the torch examples the README's command may skip."""
    if module not in REQUIRED_MODULES:
        return pytest.importorskip(module, reason=f"{module} is not installed (ONNXAFF_REQUIRE={module} fails this "
                                                  "test instead)")
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"ONNXAFF_REQUIRE names {module}, which does not import: {exc}")


# Tests skipped for want of an optional part, said after the run with what runs them (CI does: .ci/run).
BROWSER_SKIP = re.compile(r"Chromium|playwright")
MODULE_SKIP = re.compile(r"ONNXAFF_REQUIRE=(\w+)")


def optional_skips(reasons: list[str]) -> list[str]:
    """One line per optional part whose tests were skipped: how many, and how to run them."""
    browser = sum(bool(BROWSER_SKIP.search(r)) for r in reasons)
    modules: dict[str, int] = {}
    for r in reasons:
        if (m := MODULE_SKIP.search(r)):
            modules[m.group(1)] = modules.get(m.group(1), 0) + 1
    lines = [f"{browser} browser tests skipped: no headless Chromium or playwright (apt-get install chromium, pip "
             "install -e '.[browser]'; ONNXAFF_REQUIRE_BROWSER=1 fails them instead, as CI does)"] if browser else []
    lines += [f"{n} tests skipped without {m} (pip install {'torch==2.13.0' if m == 'torch' else m}; "
              f"ONNXAFF_REQUIRE={m} fails them instead, as CI does)" for m, n in sorted(modules.items())]
    return lines


def pytest_terminal_summary(terminalreporter):
    reasons = [str(r.longrepr[2]) for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and len(r.longrepr) == 3]
    for line in optional_skips(reasons):
        terminalreporter.write_line(line, yellow=True)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A two-site MLP, 64 examples of its input as .npy, and the arrays themselves (the Python API's tests)."""
    from tests.builders import mlp, save

    folder = tmp_path_factory.mktemp("tiny")
    x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    np.save(folder / "x.npy", x)
    return save(mlp(np.random.default_rng(1)), folder / "mlp.onnx"), folder / "x.npy", x


def parse(text: str) -> onnx.ModelProto:
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def ort_session(model: onnx.ModelProto):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run(model: onnx.ModelProto, feeds: dict) -> dict[str, np.ndarray]:
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def run_cli(capfd, *args) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `onnxaff ARGS` run in this process; earlier output is dropped first."""
    from onnxaff.cli import main

    capfd.readouterr()
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capfd.readouterr()
    return code, out, err


def cli_process(*args, **kw) -> subprocess.CompletedProcess:
    """`python -m onnxaff.cli ARGS` in its own interpreter, for what needs one: another environment, a signal
    that must not reach pytest, a timeout, or a stuck thread the exit has to abandon."""
    return subprocess.run([sys.executable, "-m", "onnxaff.cli", *map(str, args)], capture_output=True, text=True,
                          **kw)


def start_cli(*args, **kw) -> subprocess.Popen:
    """`python -m onnxaff.cli ARGS` started, not waited for: the test interrupts or kills it."""
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([sys.executable, "-m", "onnxaff.cli", *map(str, args)], text=True, **kw)


def wait_for_file(proc: subprocess.Popen, path: Path, seconds: float = 60) -> None:
    """Until the started CLI has written path (it reached the point a test interrupts it at), exited, or timed out."""
    deadline = time.monotonic() + seconds
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)


def stderr_once_ended(proc: subprocess.Popen, what: str, timeout: float = 20) -> str:
    """The stderr of a started CLI once it exits; if it hangs, it is killed (its whole group when it runs in a
    session of its own) and the test fails naming what it hung after."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        pytest.fail(f"the run hung after {what}")


def one_line_error(result, fragment: str, code: int = 2) -> str:
    """The one `onnxaff: error: ...` line of a failed run (nothing on stdout), which must contain fragment."""
    status, out, err = result
    lines = err.strip().splitlines()
    assert status == code, err
    assert len(lines) == 1 and lines[0].startswith("onnxaff: error: "), err
    assert fragment in lines[0], lines[0]
    assert out == ""
    return lines[0]


def refuse_calls(monkeypatch, message: str, *targets) -> None:
    """Make each target, dotted or (module, name), fail the test if it is reached: proof that a refusal came before
    the work."""
    def refuse(*args, **kwargs):
        raise AssertionError(message)

    for target in targets:
        monkeypatch.setattr(*((target,) if isinstance(target, str) else target), refuse)
