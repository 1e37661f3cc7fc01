"""The CLI's one option mapping: a configuration field's error reaches the user under its flag."""

import dataclasses

import click
import pytest

from onnxaff.analysis import AnalysisConfig
from onnxaff.cli import cli
from onnxaff.cli.config import RunOptions, analysis_kwargs, flag_map, run_options
from onnxaff.cli.options import ConfigOption, analysis_options
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


# Options of the Python API alone: `images` is set key by key (--mean: images.mean); threads and
# graph_optimization change float32 rounding only (docs/reproducibility.md).
API_ONLY = {"images", "threads", "graph_optimization"}


def test_every_config_field_has_a_flag():
    fields = {f.name for f in dataclasses.fields(AnalysisConfig)}
    flagged = {f for f in flag_map() if f in fields or f.startswith("images.")}
    assert fields - API_ONLY == {f for f in flagged if f in fields}
    assert not API_ONLY & set(flag_map())
    assert flag_map()["chunk_size"] == "--chunk-size" and flag_map()["progress"] == "--quiet"
    assert flag_map()["images.draft"] == "--fast-decode" and flag_map()["force"] == "--force"


def test_one_flag_per_field_in_every_command():
    """A field set in two commands (--chunk-size in analyze, study and demo) is one flag in all of them."""
    from onnxaff.cli.config import FIELD_OF_PARAM

    for command in cli.commands.values():
        for p in command.params:
            if isinstance(p, click.Option):
                assert flag_map()[FIELD_OF_PARAM.get(p.name, p.name)] in p.opts, (command.name, p.opts)


def test_click_defaults_are_the_configs():
    """AnalysisConfig declares each default once: the flags show it, and a command given none builds the same
    configuration as the library's (images aside: the CLI passes the folder preset explicitly)."""
    default = AnalysisConfig()
    for command in cli.commands.values():
        ctx = command.make_context(command.name, [], resilient_parsing=True)
        for p in command.params:
            if isinstance(p, ConfigOption):
                assert p.get_default(ctx) == getattr(default, p.field), (command.name, p.name)
                assert p.show_default
    ctx = cli.commands["analyze"].make_context("analyze", ["m.onnx", "--data", "x.npy"])
    flags = {k: v for k, v in ctx.params.items() if k not in ("model", "data", "out", "dry_run")}
    from_cli = run_options(**flags).analysis
    assert dataclasses.replace(from_cli, images=None) == dataclasses.replace(default, images=None)
    study = cli.commands["study"].make_context("study", ["m.onnx", "--data", "x.npy", "--out", "o"]).params
    keep = {p.name for p in click.command()(analysis_options(lambda **_: None)).params}
    from_study = AnalysisConfig(**analysis_kwargs(**{k: v for k, v in study.items() if k in keep}))
    assert dataclasses.replace(from_study, images=None) == dataclasses.replace(default, images=None)


def test_help_shows_the_config_defaults(capfd):
    code, out, _ = run_cli(capfd, "analyze", "--help")
    assert code == 0
    for text in ("[default: 4d]", "[default: 64]", "[default: sample:16]", "[default: auto]", "[default: graph]",
                 "[default: 0]"):
        assert text in " ".join(out.split()), text


def test_options_map_to_analysis_keywords():
    ctx = cli.commands["analyze"].make_context("analyze", ["m.onnx", "--data", "x.npy", "--mean", "0.5,0.5,0.5",
                                                           "--checkpoint-every", "3", "--quiet"])
    flags = {k: v for k, v in ctx.params.items() if k not in ("model", "data", "out", "dry_run")}
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


def test_a_warning_says_the_field_in_the_file_and_the_flag_on_the_terminal(tmp_path, capfd):
    import json
    import pickle

    from onnxaff.cli.echo import echo_err
    from onnxaff.errors import option
    from onnxaff.format.signature import Signature

    sig = Signature(model={}, data={}, options={}, runtime={}, metrics={}, sites=[],
                    warnings=[f"lower {option('chunk_size')} or {option('reduce', 'mean')}"])
    assert sig.warnings == ["lower chunk_size or reduce=mean"]  # what a Python caller reads
    assert json.loads(json.dumps(sig.to_dict()["warnings"])) == ["lower chunk_size or reduce=mean"]
    assert pickle.loads(pickle.dumps(sig.warnings[0])).template == sig.warnings[0].template
    echo_err(sig.warnings[0])
    assert capfd.readouterr().err == "lower --chunk-size or --reduce mean\n"
