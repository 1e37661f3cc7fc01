"""The entry point and its single error handler: a user error is one line on stderr, never a traceback."""

from __future__ import annotations

import os
import signal
import sys
import threading
import traceback

import click

from onnxaff.cli.app import cli
from onnxaff.cli.config import flag_of
from onnxaff.errors import Interrupted, OnnxaffError
from onnxaff.foundations.text import printable


def _exit_interrupted() -> None:
    """Exit 130; hard (after flushing) when a metric is stuck in a thread, which Python cannot kill or join."""
    from onnxaff.collection.scoring import busy_threads

    if busy_threads():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(130)


def error_line(exc: OnnxaffError) -> str:
    """The one line a user error prints; an option error names the flag, not the configuration field."""
    return f"onnxaff: error: {printable(exc.render(flag_of))}"


def _late_copy_or_default(signum, frame) -> None:
    """SIGTERM outside a run's own handlers: a copy of the one that just stopped a run (sent twice at once) is
    ignored, so the saved run still exits 130 with its message; any other is the default (terminate)."""
    from onnxaff.foundations.stopping import signalled_within

    if signalled_within():
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one line on stderr and exit status 2, never a traceback."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _late_copy_or_default) if main_thread else None
    restore = main_thread
    try:
        _main(argv)
    except SystemExit as exc:
        # ending after a stop signal: its late copy stays ignored until the process is gone (restored here, a copy
        # arriving during the interpreter's shutdown killed it with -15 after the state was saved)
        restore = restore and exc.code != 130
        raise
    finally:
        if restore:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _main(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="onnxaff", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("onnxaff: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Interrupted as exc:
        click.echo(f"onnxaff: interrupted: {printable(exc.render(flag_of))}", err=True)
        _exit_interrupted()
    except OnnxaffError as exc:
        click.echo(error_line(exc), err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("onnxaff: interrupted", err=True)
        _exit_interrupted()
    except MemoryError as exc:  # the last defence: runs that cannot fit are refused before they allocate
        detail = f" ({printable(exc)})" if str(exc) else ""
        click.echo(f"onnxaff: error: out of memory{detail}; lower --batch-size, --chunk-size or --limit", err=True)
        sys.exit(2)
    except Exception as exc:  # a bug: still one line, the traceback on request
        if os.environ.get("ONNXAFF_DEBUG"):
            traceback.print_exc()
        click.echo(f"onnxaff: internal error: {type(exc).__name__}: {printable(exc)} (set ONNXAFF_DEBUG=1 for the "
                   "traceback)", err=True)
        sys.exit(1)
