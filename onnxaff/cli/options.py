"""The option groups several commands share: the analysis options, the scale-out options, --exclude-flagged."""

from __future__ import annotations

import click

from onnxaff.cli.config import RunOptions


class ConfigOption(click.Option):
    """A flag whose default is AnalysisConfig's for its field (`field`, else the parameter's name): declared once,
    in the config. Read when a command parses or shows its help, never on import: the config's module loads
    onnxruntime, which `onnxaff --help` and `onnxaff plugins` need not."""

    def __init__(self, *decls, field: str | None = None, **attrs):
        super().__init__(*decls, show_default=True, **attrs)
        self.field = field or self.name

    def get_default(self, ctx, call: bool = True):
        from onnxaff.analysis.config import default

        return default(self.field)


def configured(*decls, **attrs):
    """click.option with AnalysisConfig's default (ConfigOption)."""
    return click.option(*decls, cls=ConfigOption, **attrs)


# Per-input feeding (onnxaff.data.feeding): analyze, study, and the probe run of `sites`.
FEED_OPTIONS = [
    click.option("--batch-axis", "batch_axis", multiple=True, metavar="NAME=AXIS",
                 help="The axis input NAME stacks examples on (e.g. state=1 for a [2, batch, H] state) "
                      "[default: 0; a rank-0 input has none]. Data files still hold examples on axis 0."),
    click.option("--constant", "constant", multiple=True, metavar="NAME=VALUE|FILE.npy",
                 help="Hold input NAME fixed for every example, not drawn from --data: a number (a rank-0 input's "
                      "value, or filling one example), or one example in a .npy file, repeated along the batch axis."),
    click.option("--input-range", "input_range", multiple=True, metavar="NAME=LOW:HIGH",
                 help="Synthetic values of input NAME in [LOW, HIGH) (a float input drawn uniformly) [default: token "
                      "ids below their embedding table's rows, else the synthetic spec's]."),
    configured("--pad", type=float, metavar="FRACTION",
               help="Synthetic mask inputs (named *mask*, shaped as the token ids) are all ones; with FRACTION, each "
                    "example's last positions, up to that fraction, are 0 (seeded; one position always kept)."),
]

# How audio folders and text files become examples: analyze, study, and the probe run of `sites`.
SOURCE_OPTIONS = [
    configured("--sample-rate", type=int, help="Hz an audio folder's files (--data audio:FOLDER) are resampled to."),
    configured("--tokenizer", metavar="TOKENIZER.JSON",
               help="Text data (--data text:FILE): a Hugging Face tokenizer.json (needs onnxaff[text])."),
    configured("--max-length", "max_length", type=int,
               help="Text data: tokens per example [default: the model's sequence length, else 128]."),
    configured("--pack", is_flag=True,
               help="Text data: examples are windows of the sequence length over all texts' tokens laid end to end "
                    "(no padding: attention sites need it, docs/metrics.md)."),
]

ANALYSIS_OPTIONS = [
    configured("--metrics",
               help="Comma-separated metrics, each NAME or NAME:KEY=VALUE:KEY=VALUE (see `onnxaff plugins`) "
                    "[default: the metrics that declare themselves default; `onnxaff plugins --format json`]."),
    configured("--protocol", metavar="NAME",
               help="A named protocol setting --metrics, --chunk-size and --reduce at once: width (the defaults: "
                    "affinity, 4·D rows per chunk, 16 sampled positions per example) or paper (affinity, 512 rows per "
                    "chunk, one row per example: Bouniot et al.'s numbers); an option given against it: refused."),
    configured("--chunk-size", help="Rows per scored chunk, or Kd: K·D rows at a site of D features (at least 64)."),
    configured("--batch-size", type=int),
    configured("--limit", type=int, help="Use at most N examples."),
    configured("--reduce", help="How a site's tensors become [rows, D] features: mean, reference, positions, "
               "flatten, or sample:K (K positions per example, seeded: per-position scores, not pooled ones)."),
    configured("--device", type=click.Choice(["auto", "cpu", "cuda"])),
    configured("--intervals", type=click.Choice(["auto", "chunks", "half", "none"]),
               help="95 % intervals of chunk scores: auto (over chunks; a site's only chunk from half-samples of "
                    "it), chunks (over chunks only), half (half-samples of the first chunk, every site), none."),
    configured("--reduce-in", "reduce_in", type=click.Choice(["graph", "numpy"]),
               help="numpy: fetch full activations and reduce on the host (naive baseline)."),
    configured("--chunk-workers", type=int,
               help="Threads scoring chunks beside the runtime [default: cores − 1, at least 2, at most 4; "
                    "0: inline]."),
    configured("--layout", type=click.Choice(["auto", "channels_first", "channels_last"]),
               help="Feature axis of rank-3+ site tensors: channels_first (axis 1: [N, C, H, W], a 1-D "
                    "conv's [N, C, T]) or channels_last (the last: NHWC, tokens [N, T, C]); auto: read off the graph."),
    configured("--seed", type=int, help="Seed of synthetic data."),
    configured("--mask", metavar="INPUT",
               help="The padding mask input [batch, tokens] (1: token, 0: padding) whose padded tokens are left out; "
                    "auto: an input named attention_mask, none: no padding mask."),
    click.option("--input-shape", "input_shape", multiple=True, metavar="NAME=DxDxD",
                 help="Dims after the batch axis for an input with symbolic dims (synthetic data and image "
                      "folders: e.g. x=3x48x320)."),
    *FEED_OPTIONS,
    *SOURCE_OPTIONS,
    click.option("--plugin", "plugin", multiple=True, type=click.Path(dir_okay=False),
                 help="A Python file defining extra metrics."),
    click.option("--preprocess", default="torchvision", show_default=True,
                 type=click.Choice(["torchvision", "inception", "caffe", "raw"]), help="Image preset."),
    click.option("--mean", default=None, help="Per-channel mean after scaling, e.g. 0.5,0.5,0.5 (images)."),
    click.option("--std", default=None, help="Per-channel std, e.g. 0.5,0.5,0.5 (images)."),
    click.option("--resize", default=None, metavar="N|HxW",
                 help="Shorter side, or exact HxW, before the centre crop (images)."),
    click.option("--crop", default=None, metavar="N|HxW",
                 help="Centre crop / letterbox size (images; default: the model's)."),
    click.option("--fit", type=click.Choice(["crop", "letterbox", "pad"]), default=None,
                 help="Images: resize + centre crop [default], or scale to fit inside and pad: letterbox "
                      "(centred, as detectors), pad (top-left, as text recognisers)."),
    click.option("--pad-value", "pad_value", default=None, metavar="V[,V,V]",
                 help="Pixel value (0-255, before scaling) of --fit letterbox/pad borders [default: 0]."),
    click.option("--interpolation", default=None, help="nearest|bilinear|bicubic|lanczos|box|hamming."),
    click.option("--shuffle", is_flag=True, help="A seeded subset spread over classes (images)."),
    click.option("--workers", type=int, default=None, help="Decoding processes [default: min(4, cores)]."),
    click.option("--fast-decode", is_flag=True, help="JPEG draft-mode decoding (faster, not bit-exact)."),
    click.option("--pairs", default=None, metavar="IN:OUT[,IN:OUT...]",
                 help="Also score these tensor pairs as sites (any two tensors of the model)."),
    click.option("--blocks", default=None, metavar="KINDS",
                 help="Also score discovered blocks: residual, attention, mlp or all (comma-separated); "
                      "residual stages get trajectory metrics."),
    click.option("--quiet", is_flag=True, help="No progress bar or summary."),
]

SCALE_OPTIONS = [
    configured("--shard", metavar="I/N",
               help="Analyse shard I of N (0-based; chunk-aligned slices) and save its state for `onnxaff merge`."),
    # How a run is executed and saved: RunOptions' defaults (cli/config.py), light enough to read on import.
    click.option("--executor", type=click.Choice(["local", "ray"]), default=RunOptions.executor, show_default=True,
                 help="ray: run --shards shards as Ray tasks and merge them (pip install 'onnxaff[ray]')."),
    click.option("--shards", type=int, default=RunOptions.shards, show_default=True, help="Shards for --executor ray."),
    click.option("--ray-address", default=RunOptions.ray_address,
                 help="An existing Ray cluster (e.g. auto) [default: a local one]."),
    click.option("--checkpoint", default=RunOptions.checkpoint, help="Checkpoint file [default: OUT.ckpt.npz]."),
    click.option("--checkpoint-every", type=int, default=RunOptions.checkpoint_every, show_default=True,
                 help="Save the state every N batches (0: only on SIGINT/SIGTERM)."),
    click.option("--resume", is_flag=True, help="Continue from the checkpoint of an interrupted run."),
]


def _apply(options: list):
    def decorate(f):
        for option in reversed(options):
            f = option(f)
        return f

    return decorate


analysis_options = _apply(ANALYSIS_OPTIONS)
feed_options = _apply(FEED_OPTIONS + SOURCE_OPTIONS)
scale_options = _apply(SCALE_OPTIONS)
exclude_flagged = click.option("--exclude-flagged", is_flag=True,
                               help="Leave out scores with flags (few rows, partial chunk, ...) and say how many.")
