"""The one mapping from command-line options to AnalysisConfig fields, and back from a
configuration field to its flag (so a library error naming `chunk_size` reads `--chunk-size` here)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from onnxaff.cli.app import cli

if TYPE_CHECKING:
    from onnxaff.analysis.config import AnalysisConfig

IMAGE_KEYS = ("preprocess", "mean", "std", "resize", "crop", "fit", "pad_value", "interpolation", "shuffle", "workers")
# The click parameters that set a configuration field of another name. Every other option's parameter is named
# as its field (--chunk-size: chunk_size), or as a run's or a command's own option (--resume: resume).
FIELD_OF_PARAM = {"quiet": "progress", "plugin": "plugins", "input_shape": "input_shapes", "batch_axis": "batch_axes",
                  "constant": "constants", "input_range": "input_ranges",
                  "fast_decode": "images.draft", **{key: f"images.{key}" for key in IMAGE_KEYS}}


@functools.cache
def flag_map() -> dict[str, str]:
    """Configuration field (of AnalysisConfig, `images.KEY` of its image options, or of a run) -> its flag, read
    off the commands' own click options, so a flag is declared once (built on first use: every command is
    registered by then)."""
    out = {}
    for command in cli.commands.values():
        for p in command.params:
            if isinstance(p, click.Option):
                out.setdefault(FIELD_OF_PARAM.get(p.name, p.name), next(o for o in p.opts if o.startswith("--")))
    return out


def given_fields(ctx: click.Context, params) -> set[str]:
    """The configuration fields (`images.KEY` for image options) whose flags the command line gave: a study's
    manifest `[options]` fill the others."""
    from click.core import ParameterSource

    return {FIELD_OF_PARAM.get(name, name) for name in params
            if ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)}


def flag_of(field_name: str) -> str:
    """The flag that sets a configuration field (the field itself where no flag does)."""
    return flag_map().get(field_name, field_name)


@dataclass(frozen=True)
class RunOptions:
    """Everything `analyze` was asked: the analysis' configuration, and how to run and save it."""

    analysis: AnalysisConfig | None = None
    executor: str = "local"
    shards: int = 4
    ray_address: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int = 0
    resume: bool = False

    @property
    def quiet(self) -> bool:
        """--quiet: no progress bar, no summary (the config's progress says it)."""
        return not self.analysis.progress


def image_options(preprocess, mean, std, resize, crop, interpolation, fit, pad_value, shuffle, workers,
                  fast_decode) -> dict:
    """The Analysis `images` dict: the preset and decoding options, and every size or value given (as typed:
    AnalysisConfig parses them)."""
    images = {"preprocess": preprocess, "shuffle": shuffle, "draft": fast_decode,
              "workers": min(4, os.cpu_count() or 1) if workers is None else workers}
    given = {"mean": mean, "std": std, "resize": resize, "crop": crop, "interpolation": interpolation, "fit": fit,
             "pad_value": pad_value}
    return images | {key: value for key, value in given.items() if value is not None}


def analysis_kwargs(metrics, chunk_size, batch_size, limit, reduce, device, reduce_in, chunk_workers, layout, seed,
                    input_shape, plugin, pairs, blocks, quiet, nlc_directions=None, intervals="auto",
                    sample_rate=None, tokenizer=None, max_length=None, pack=False, mask=None, batch_axis=(),
                    constant=(), input_range=(), pad=0.0, protocol=None, **image_flags) -> dict:
    """Analysis keyword arguments from the analysis flags (`analyze`, `study`, shards and Ray alike), each value as
    the command line gave it: AnalysisConfig parses the texts (onnxaff.analysis.textual) and checks them all."""
    from onnxaff.analysis.config import default

    options = dict(
        metrics=metrics, chunk_size=chunk_size, batch_size=batch_size, limit=limit, reduce=reduce, device=device,
        layout=layout, seed=seed, input_shapes=input_shape, images=image_options(**image_flags),
        plugins=list(plugin), progress=not quiet, reduce_in=reduce_in, chunk_workers=chunk_workers, intervals=intervals,
        pairs=pairs, blocks=blocks, **feed_kwargs(batch_axis, constant, input_range, pad),
    )
    if nlc_directions is not None:
        options["nlc_directions"] = nlc_directions
    if sample_rate is not None and sample_rate != default("sample_rate"):  # a study's options digest unchanged
        options["sample_rate"] = sample_rate
    options.update({k: v for k, v in (("tokenizer", tokenizer), ("max_length", max_length)) if v is not None})
    if pack:  # only when given: a study's options digest unchanged
        options["pack"] = True
    if mask is not None and mask != default("mask"):  # as sample_rate: a study's options digest unchanged
        options["mask"] = mask
    if protocol is not None:  # as mask
        options["protocol"] = protocol
        _given_against(protocol, options)
    return options


def _given_against(protocol: str, options: dict) -> None:
    """A flag given on the command line against the named protocol is refused, even where its value is the default
    (`--protocol paper --chunk-size 4d`): AnalysisConfig cannot tell a default from a value given equal to it."""
    from onnxaff.analysis.config import refuse_given_against

    try:
        given = given_fields(click.get_current_context(), ("chunk_size", "reduce"))
    except RuntimeError:  # no command running: the config's own rule holds
        return
    refuse_given_against(protocol, {name: options[name] for name in given})


def feed_kwargs(batch_axis=(), constant=(), input_range=(), pad=0.0) -> dict:
    """The per-input feeding fields from their flags (--batch-axis, --constant, --input-range, --pad), as typed."""
    given = {"batch_axes": batch_axis, "constants": constant, "input_ranges": input_range, "pad": pad}
    return {k: v for k, v in given.items() if v}  # none given: a study's options digest unchanged


def run_options(shard=None, executor=RunOptions.executor, shards=RunOptions.shards, ray_address=None, checkpoint=None,
                checkpoint_every=RunOptions.checkpoint_every, resume=False, **flags) -> RunOptions:
    """`analyze`'s options, each checked once, before the model is read."""
    from onnxaff.analysis.config import AnalysisConfig, check_checkpoint_every  # not on import: `--help` stays fast

    analysis = AnalysisConfig(**analysis_kwargs(**flags), shard=shard)  # validated here, before the model is read
    return RunOptions(analysis=analysis, executor=executor,
                      shards=shards, ray_address=ray_address, checkpoint=checkpoint,
                      checkpoint_every=check_checkpoint_every(checkpoint_every), resume=resume)
