"""The command line only calls the layers above it (docs/architecture.md): it hands the analysis options on as typed,
and AnalysisConfig parses them (onnxaff.analysis.textual, with the data and graph layers' parsers) and says what is
wrong in one line naming the field; what a run reads, which no output may replace, the analysis layer names
(onnxaff.analysis.reads)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import onnxaff
import onnxaff.studies
from onnxaff.analysis import AnalysisConfig
from onnxaff.analysis.textual import parse_texts
from onnxaff.errors import ConfigError
from tests.conftest import parse, run_cli

CLI = Path(onnxaff.__file__).parent / "cli"
# The graph names `onnxaff sites` shows a site with (its D, its parameters): display, no parsing.
SHOWN = {("onnxaff.graph.reduction", "feature_dim"), ("onnxaff.graph.sites", "format_params")}


def _imports() -> list[tuple[str, str, str]]:
    """(cli file, module, name) of every onnxaff import in onnxaff/cli/, at the top or inside a function."""
    found = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("onnxaff"):
                found += [(path.name, node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                found += [(path.name, a.name, "") for a in node.names if a.name.startswith("onnxaff")]
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_cli_imports_no_parser_of_the_data_or_graph_layers():
    wrong = [i for i in _imports() if _within(i[1], "onnxaff.data")
             or (_within(i[1], "onnxaff.graph") and i[1:] not in SHOWN)]
    assert not wrong, f"the CLI reaches below the analysis layer (hand the texts to AnalysisConfig): {wrong}"


def test_every_parser_the_cli_calls_is_the_analysis_layers():
    parsers = [i for i in _imports() if i[2].startswith("parse_")]
    assert parsers and all(_within(module, "onnxaff.analysis") for _, module, _ in parsers), parsers


def test_the_cli_calls_only_the_public_entry_points_of_the_studies():
    """`from onnxaff.studies import NAME`, NAME one that the package exports (run_study, resolve_models,
    preview_study): never a module inside it (the files a run reads: onnxaff.analysis.reads)."""
    studies = [i for i in _imports() if _within(i[1], "onnxaff.studies")]
    assert studies and all(module == "onnxaff.studies" and name in onnxaff.studies.__all__
                           for _, module, name in studies), studies


TYPED = {"metrics": "affinity, cka:eps=1e-5", "input_shapes": "x=3x48x192", "pairs": "a:b,c::d:e",
         "blocks": "mlp,residual", "batch_axes": ("state=1",), "constants": ["x=2"], "input_ranges": ("ids=0:10",),
         "images": {"preprocess": "raw", "mean": "0.5,0.5,0.5", "std": "0.25", "resize": "48x320", "crop": "48",
                    "pad_value": "114"}}
VALUES = {"metrics": ["affinity", "cka:eps=1e-5"], "input_shapes": {"x": (3, 48, 192)},
          "pairs": [("a", "b"), ("c", "d:e")], "blocks": ["mlp", "residual"], "batch_axes": {"state": 1},
          "constants": {"x": 2}, "input_ranges": {"ids": (0, 10)},
          "images": {"preprocess": "raw", "mean": (0.5, 0.5, 0.5), "std": (0.25,), "resize": (48, 320), "crop": 48,
                     "pad_value": (114.0,)}}


def test_the_config_takes_the_typed_forms_as_their_values():
    assert parse_texts(TYPED) == VALUES
    assert parse_texts(VALUES) == VALUES  # parsing twice changes nothing
    assert AnalysisConfig(**TYPED) == AnalysisConfig(**VALUES)
    config = AnalysisConfig(**TYPED)
    assert config.input_shapes == {"x": (3, 48, 192)} and config.pairs == (("a", "b"), ("c", "d:e"))
    assert config.metrics == ("affinity", "cka:eps=1e-5") and config.images["resize"] == (48, 320)
    assert AnalysisConfig(input_shapes={"x": "3x48x192"}).input_shapes == {"x": (3, 48, 192)}
    assert AnalysisConfig(input_shapes=["x=3", "y=4,5"]).input_shapes == {"x": (3,), "y": (4, 5)}
    assert AnalysisConfig(pairs=["a:b", "c:d"]).pairs == (("a", "b"), ("c", "d"))
    assert AnalysisConfig(metrics="affinity").metrics == ("affinity",)  # one spec, as before


def test_the_cli_hands_the_options_on_as_typed():
    from onnxaff.cli import cli
    from onnxaff.cli.config import analysis_kwargs

    ctx = cli.commands["analyze"].make_context("analyze", [
        "m.onnx", "--data", "x.npy", "--input-shape", "x=3x48x192", "--pairs", "a:b", "--blocks", "mlp",
        "--batch-axis", "state=1", "--mean", "0.5", "--crop", "48x320", "--metrics", "affinity,cka"])
    flags = {k: v for k, v in ctx.params.items() if k not in ("model", "data", "out", "dry_run", "shard", "executor",
                                                              "shards", "ray_address", "checkpoint",
                                                              "checkpoint_every", "resume")}
    typed = analysis_kwargs(**flags)
    assert (typed["input_shapes"], typed["pairs"], typed["blocks"]) == (("x=3x48x192",), "a:b", "mlp")
    assert (typed["batch_axes"], typed["metrics"]) == (("state=1",), "affinity,cka")
    assert (typed["images"]["mean"], typed["images"]["crop"]) == ("0.5", "48x320")
    config = AnalysisConfig(**typed)
    assert config.input_shapes == {"x": (3, 48, 192)} and config.images["crop"] == (48, 320)


@pytest.mark.parametrize("typed,field,says", [
    ({"input_shapes": "x=3xa"}, "input_shapes", "'x=3xa' is not NAME=D1xD2x..."),
    ({"input_shapes": ("x=0",)}, "input_shapes", "'x=0' is not NAME=D1xD2x..."),
    ({"input_shapes": {"x": "3xa"}}, "input_shapes", "'x=3xa' is not NAME"),
    ({"pairs": "justone"}, "pairs", "item 'justone' is not IN:OUT"),
    ({"pairs": ["a:b", "c"]}, "pairs", "item 'c' is not IN:OUT"),
    ({"blocks": "conv"}, "blocks", "conv"),
    ({"metrics": " , "}, "metrics", "' , ' names no metric"),
    ({"batch_axes": ("state=one",)}, "batch_axes", "the axis is not a whole number"),
    ({"input_ranges": "ids=0"}, "input_ranges", "is not NAME=LOW:HIGH"),
    ({"constants": ("x",)}, "constants", "'x' is not NAME=VALUE"),
    ({"images": {"mean": "a,b"}}, "images.mean", "'a,b' is not a comma-separated list of numbers"),
    ({"images": {"crop": "48y320"}}, "images.crop", "'48y320' is not a size"),
])
def test_a_bad_text_is_one_line_naming_its_field(typed, field, says):
    with pytest.raises(ConfigError) as info:
        AnalysisConfig(**typed)
    message = str(info.value)
    assert info.value.field == field and field in message and says in message
    assert "\n" not in message and "--" not in message


@pytest.mark.parametrize("args,message", [
    (["--input-shape", "x=3xa"], "--input-shape 'x=3xa' is not NAME=D1xD2x... (dims after the batch axis)"),
    (["--pairs", "justone"], "--pairs item 'justone' is not IN:OUT (two tensor names)"),
    (["--crop", "48y320"], "--crop '48y320' is not a size: give N or HxW (positive integers, e.g. 48x320)"),
    (["--batch-axis", "state=one"], "--batch-axis state='one': the axis is not a whole number"),
])
@pytest.mark.parametrize("command", ["analyze", "sites"])
def test_the_cli_still_names_the_flag(tmp_path, capfd, command, args, message):
    if command == "sites" and args[0] == "--crop":
        return  # sites takes no image options
    extra = ["--data", "synthetic:gaussian", "--out", tmp_path / "s.json"] if command == "analyze" else []
    code, _, err = run_cli(capfd, command, tmp_path / "m.onnx", *extra, *args)
    assert code == 2 and err == f"onnxaff: error: {message}\n"


SYMBOLIC = parse('<ir_version: 8, opset_import: ["" : 17]> g (float[N, D] x) => (float[N, D] y) { y = Tanh(x) }')


def test_the_python_api_takes_input_shapes_as_text():
    sig = onnxaff.analyze(SYMBOLIC, "synthetic:gaussian:n=64", input_shapes="x=8", chunk_size=32, reduce="mean",
                          progress=False)
    assert sig.options["input_shapes"] == {"x": [8]}
    assert [s.ok for s in onnxaff.sites(SYMBOLIC, input_shapes="x=8")] == [True]
