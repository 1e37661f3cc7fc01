"""The CLI's one option mapping: a configuration field's error reaches the user under its flag."""

import click
import pytest

from onnxaff.analysis import AnalysisConfig
from onnxaff.cli import cli
from onnxaff.cli.config import FLAGS, RunOptions, run_options
from onnxaff.errors import ConfigError
from tests.conftest import run_cli


@pytest.fixture
def raising_command():
    """A throwaway command that raises the ConfigError it is given, through the real entry point."""
    raised = {}

    @cli.command(name="_raise")
    def _raise() -> None:
        raise raised["exc"]

    yield raised
    cli.commands.pop("_raise")


@pytest.mark.parametrize("field,flag", [("chunk_size", "--chunk-size"), ("images.resize", "--resize"),
                                        ("nlc_directions", "--nlc-directions"), ("not_a_field", "not_a_field")])
def test_config_error_names_the_flag(raising_command, capfd, field, flag):
    raising_command["exc"] = ConfigError(field, "{option} must be at least 2, got 1")
    code, out, err = run_cli(capfd, "_raise")
    assert code == 2 and out == ""
    assert err == f"onnxaff: error: {flag} must be at least 2, got 1\n"


def test_every_analysis_flag_has_its_field():
    def flags_of(command):
        return {opt for p in cli.commands[command].params if isinstance(p, click.Option) for opt in p.opts}

    analyze = flags_of("analyze")
    assert set(FLAGS.values()) - {"--metric"} <= analyze and "--metric" in flags_of("report")
    assert analyze - set(FLAGS.values()) <= {"--out", "--help"}


def test_options_map_to_analysis_keywords():
    ctx = cli.commands["analyze"].make_context("analyze", ["m.onnx", "--data", "x.npy", "--mean", "0.5,0.5,0.5",
                                                           "--checkpoint-every", "3", "--quiet"])
    flags = {k: v for k, v in ctx.params.items() if k not in ("model", "data", "out")}
    opts = run_options(**flags)
    assert isinstance(opts, RunOptions) and opts.checkpoint_every == 3 and opts.quiet
    assert opts.analysis.images["mean"] == (0.5, 0.5, 0.5) and opts.analysis.progress is False
    default = AnalysisConfig()  # flags not given leave the library's defaults
    assert (opts.analysis.metrics, opts.analysis.nlc_directions) == (default.metrics, default.nlc_directions)


@pytest.mark.parametrize("args,message", [
    (["--checkpoint-every", "-1"], "--checkpoint-every must be 0 or positive, got -1"),
    (["--mean", "a,b"], "--mean 'a,b' is not a comma-separated list of numbers"),
    (["--metrics", " , "], "--metrics ' , ' names no metric"),
])
def test_option_errors_name_the_flag(tmp_path, capfd, args, message):
    code, _, err = run_cli(capfd, "analyze", tmp_path / "m.onnx", "--data", "synthetic:gaussian",
                           "--out", tmp_path / "s.json", *args)
    assert code == 2 and err == f"onnxaff: error: {message}\n"
