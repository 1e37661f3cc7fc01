"""`onnxaff.analyze` and `onnxaff.sites`: one model, from Python (a notebook), with every option a keyword."""

from __future__ import annotations

from collections.abc import Mapping

from onnxaff.analysis.sitelist import PROBE_DATA
from onnxaff.api.options import DEFAULT, data_arg, given, model_file, refuse_against_protocol
from onnxaff.format.signature import Signature

FEEDING = ("batch_axes", "constants", "input_ranges", "pad", "sample_rate", "tokenizer", "max_length", "pack")


def analyze(model, data, *, metrics=DEFAULT.metrics, chunk_size=DEFAULT.chunk_size,
            batch_size=DEFAULT.batch_size, limit=DEFAULT.limit, reduce=DEFAULT.reduce,
            device=DEFAULT.device, preprocess=None, input_shapes=DEFAULT.input_shapes, seed=DEFAULT.seed,
            progress=DEFAULT.progress, intervals=DEFAULT.intervals, pairs=DEFAULT.pairs,
            blocks=DEFAULT.blocks, plugins=DEFAULT.plugins, tokenizer=DEFAULT.tokenizer,
            max_length=DEFAULT.max_length, example_input=None, onnx_path=None, name: str | None = None,
            config=None, checkpoint=None, checkpoint_every: int = 0, resume: bool = False, **options) -> Signature:
    """Score every non-linearity of a model on data: its non-linearity signature.

    Parameters
    ----------
    model : str, os.PathLike, onnx.ModelProto or torch.nn.Module
        An ONNX file (its external weights beside it), a loaded proto, or a PyTorch module, which is exported
        first with ``onnxaff.from_torch`` (eval mode, opset 17, dynamic batch; every activation module it
        declares must survive the export) on `example_input`.
    data : str, os.PathLike, array, dict of arrays, iterable of batches, or list of str
        An image folder (flat, or one subfolder per class), a ``.npy``/``.npz`` file (arrays keyed by input name),
        ``audio:FOLDER``, ``synthetic:gaussian|uniform|grid[:n=N,...]``, ``text:FILE`` or a list of str (with
        `tokenizer`); or data in memory: a numpy array (examples on axis 0), a dict of arrays by input name, or
        any iterable of batches, such as a ``torch.utils.data.DataLoader`` (numpy arrays or torch tensors; an
        ``(x, y)`` item feeds x; a dict item feeds the inputs it names). An iterable is read once, when the run
        opens, up to `limit` examples, and held in memory; the signature records its sha256.
    metrics : list of str, optional
        Metric specs (``"affinity"``, ``"cka"``, ``"affinity:eps=1e-5"``; ``onnxaff plugins`` lists them). Default:
        the metrics that declare themselves default (affinity, affinity_lw).
    chunk_size : int or str
        Rows per scored chunk (512, the paper's protocol); every score is the mean over chunks. ``"4d"``: 4·D rows
        at a site of D features (at least 64), so no width outgrows its chunk.
    batch_size : int
        Examples per inference batch (a model with a fixed batch size gets batches of that size).
    limit : int, optional
        Analyse only the first `limit` examples.
    reduce : {"mean", "reference", "positions", "flatten", "sample:K"}
        How a site's activations become feature rows: the mean over positions (one row per example), the
        reference code's convention, every position a row, the whole tensor one row, or K positions of each
        example drawn by its index and the seed (per-position scores: another quantity than pooled ones).
    device : {"auto", "cpu", "cuda"}
        Where onnxruntime runs the model.
    preprocess : ImagePreprocess, str or dict, optional
        How an image folder is read: an ``onnxaff.ImagePreprocess``, a preset's name (``"inception"``), or a
        dict of image options. Default: torchvision's ImageNet preprocessing at the model's input size. Given
        with data that are no image folder (fed as they are), a ConfigError.
    input_shapes : dict of str to tuple of int, optional
        Dims after the batch axis for inputs with symbolic dims (synthetic data, image and audio folders).
    seed : int
        Seed of synthetic data and of a shuffled image subset.
    progress : bool
        A progress bar on stderr.
    intervals : {"auto", "chunks", "half", "none"}
        How the 95 % intervals of chunk scores are computed (docs/statistics.md).
    pairs : list of (str, str), optional
        Also score these (input tensor, output tensor) pairs.
    blocks : list of str, optional
        Also score discovered blocks: ``"residual"``, ``"attention"``, ``"mlp"``.
    plugins : list of str, optional
        Python files defining more metrics.
    tokenizer : str or tokenizers.Tokenizer, optional
        Text data: a ``tokenizer.json`` path or a loaded tokenizer.
    max_length : int, optional
        Text data: tokens per example (default: the model's sequence length, else 128).
    example_input : torch.Tensor or tuple of torch.Tensor, optional
        A torch `model` only: one batch it takes, for the export.
    onnx_path : str or os.PathLike, optional
        A torch `model` only: where to keep the exported file (default: a temporary file, removed after).
    name : str, optional
        The model's name in the signature and its reports (default: the file's stem; a torch module's class).
    config : AnalysisConfig, optional
        Every option at once; the keywords given replace its fields.
    checkpoint : str or os.PathLike, optional
        Save the run's state there every `checkpoint_every` batches and on SIGINT/SIGTERM (then raising
        ``onnxaff.errors.Interrupted``); with ``resume=True`` continue from it. The file stays until removed.
    checkpoint_every : int
        Batches between saves (0: on signals only).
    resume : bool
        Continue the run saved at `checkpoint` (its model, data and options must be this run's).
    **options
        The other fields of ``onnxaff.AnalysisConfig``: `layout` (feature axis of rank-3+ tensors: ``"auto"``,
        ``"channels_first"``, ``"channels_last"``), `reduce_in` (``"numpy"``: the naive host-side reduction),
        `chunk_workers`, `threads`, `graph_optimization`, `nlc_directions`, `shard` (``"i/n"``), `batch_axes`,
        `constants`, `input_ranges`, `pad`, `mask` (per-input feeding, docs/usage.md), `sample_rate` (audio),
        `pack` (text), `images` (the image options as a dict; `preprocess` says the same).

    Returns
    -------
    Signature
        Per site, in forward order, every metric's score; ``scores(metric)`` is the signature, ``summary()``
        its statistics, ``to_pandas()`` the per-site table, ``write(path)`` the JSON file (docs/signature.md).

    Raises
    ------
    onnxaff.errors.ConfigError
        A wrong option value, naming the option.
    onnxaff.errors.OnnxaffError
        A model or data the analysis cannot use, in one line saying why.

    See Also
    --------
    sites : the sites this analysis scores.
    compare, report : DTW distances between signatures; HTML pages.

    Examples
    --------
    A shipped MNIST classifier (scikit-learn, exported with skl2onnx) on its held-out digits:

    >>> import numpy as np
    >>> import onnxaff
    >>> from onnxaff_models import shipped_model
    >>> mlp = shipped_model("sk_mlp_relu")
    >>> sig = onnxaff.analyze(mlp.path, mlp.data, limit=256, chunk_size=128, progress=False)
    >>> [site.kind for site in sig.sites]
    ['relu', 'relu', 'relu', 'softmax']
    >>> all(0 <= score <= 1 for score in sig.scores("affinity"))
    True

    The same digits from memory, as (x, y) batches the way a DataLoader yields them:

    >>> digits = np.load(mlp.data)
    >>> batches = ((digits["image"][i:i + 64], digits["label"][i:i + 64]) for i in range(0, 256, 64))
    >>> onnxaff.analyze(mlp.path, batches, chunk_size=128, progress=False).scores() == sig.scores()
    True
    """
    from onnxaff.analysis import analyze as run

    chosen = given(preprocess, metrics=metrics, chunk_size=chunk_size, batch_size=batch_size, limit=limit,
                   reduce=reduce, device=device, input_shapes=input_shapes, seed=seed, progress=progress,
                   intervals=intervals, pairs=pairs, blocks=blocks, plugins=plugins, tokenizer=tokenizer,
                   max_length=max_length, **options)
    refuse_against_protocol(chosen, config)
    if "images" in chosen:  # said in so many words: refused for data no image option applies to, even a default
        from onnxaff.data import ImagePreprocess, refuse_image_options

        images = chosen["images"]
        images = images.options() if isinstance(images, ImagePreprocess) else images
        if isinstance(images, Mapping):  # anything else: AnalysisConfig says what it takes
            refuse_image_options(data_arg(data), images, explicit=True)
    with model_file(model, example_input, onnx_path) as (path, export):
        sig = run(path, data_arg(data), config=config, checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                  resume=resume, **chosen)
    if export is not None:
        sig.model["export"] = {k: v for k, v in export.items() if k != "temporary"}
        if export.get("temporary"):
            sig.model["path"] = None  # removed: the signature names no file that is not there
    if name is not None:
        sig.model["name"] = name
    return sig


class Sites(list):
    """The sites of a model (onnxaff.graph.Site), in the order `analyze` numbers them; a notebook shows them as a
    table. `misses`: with ``explain=True``, the non-linearities no site names and why each rule refused."""

    misses: list | None = None

    def records(self) -> list[dict]:
        """Each site as ``onnxaff sites --format json`` prints it."""
        from onnxaff.graph.reduction import feature_dim

        return [s.to_dict() | {"dim": feature_dim(s, "mean")} for s in self]

    def to_pandas(self):
        """`records()` as a DataFrame indexed by site index (needs pandas)."""
        from onnxaff.format.tables import frame

        return frame(self.records(), "index", "Sites")

    def _repr_html_(self) -> str:
        from onnxaff.format.tables import html_table
        from onnxaff.graph.sites import format_params
        from onnxaff.reports.console import fmt_shape

        rows = [[s.index, s.id, s.kind, s.status, fmt_shape(s.input_shape), r["dim"], "+".join(s.op_types),
                 format_params(s.params), s.reason] for s, r in zip(self, self.records(), strict=True)]
        ok = sum(s.ok for s in self)
        return (f"<p>{len(self)} sites ({ok} ok, {len(self) - ok} skipped)</p>"
                + html_table(["#", "id", "kind", "status", "shape", "D", "ops", "params", "note"], rows))


def sites(model, data=PROBE_DATA, *, layout=DEFAULT.layout, input_shapes=DEFAULT.input_shapes,
          pairs=DEFAULT.pairs, blocks=DEFAULT.blocks, example_input=None, explain: bool = False,
          **feeding) -> Sites:
    """The non-linearities `analyze` would score, numbered and with the status it gives them.

    Exactly what ``onnxaff sites MODEL`` lists: the activations (single nodes and the decomposed forms exporters
    write) in forward order, then any `pairs` and `blocks`. A site whose rank static shape inference misses (a
    dynamic Reshape) gets its shape from one probe run on `data`, as `analyze` gets it from its first batch.

    Parameters
    ----------
    model : str, os.PathLike, onnx.ModelProto or torch.nn.Module
        As for `analyze` (a torch module needs `example_input`).
    data : str, array or iterable, optional
        The probe run's data (any data `analyze` takes). Default: ``"synthetic:gaussian"``, shaped by
        `input_shapes` where the model's dims are symbolic; without them such a site stays skipped, its note
        saying so.
    layout : {"auto", "channels_first", "channels_last"}
        The feature axis of rank-3+ tensors.
    input_shapes : dict of str to tuple of int, optional
        Dims after the batch axis for inputs with symbolic dims.
    pairs : list of (str, str), optional
        Also list these tensor pairs.
    blocks : list of str, optional
        Also list discovered blocks (``"residual"``, ``"attention"``, ``"mlp"``).
    example_input : torch.Tensor, optional
        A torch `model` only: one batch it takes, for the export.
    explain : bool
        Also say, in ``.misses``, why each non-linearity no site names was refused by every rule tried.
    **feeding
        Per-input feeding of the probe run, as for `analyze`: `batch_axes`, `constants`, `input_ranges`, `pad`,
        `sample_rate`, `tokenizer`, `max_length`, `pack`.

    Returns
    -------
    Sites
        A list of ``onnxaff.graph.Site`` (``kind``, ``input``, ``output``, ``status``, ``reason``, ...);
        ``records()`` gives them as ``onnxaff sites --format json`` does, ``to_pandas()`` as a table.

    Examples
    --------
    >>> import onnxaff
    >>> from onnxaff_models import shipped_model
    >>> found = onnxaff.sites(shipped_model("torch_vit").path)
    >>> [(site.kind, site.status) for site in found]
    [('softmax', 'ok'), ('gelu', 'ok'), ('softmax', 'ok'), ('gelu', 'ok')]
    """
    from onnxaff.analysis.config import AnalysisConfig
    from onnxaff.analysis.sitelist import sites_of

    unknown = sorted(set(feeding) - set(FEEDING))
    if unknown:
        raise TypeError(f"sites() got an unexpected keyword argument {unknown[0]!r}")
    chosen = given(layout=layout, input_shapes=input_shapes, pairs=pairs, blocks=blocks, **feeding)
    config = AnalysisConfig(**chosen)  # checked as analyze checks them
    with model_file(model, example_input) as (path, _):
        listed = sites_of(path, config.layout, config.pairs, config.blocks, data=data_arg(data),
                          shapes=config.input_shapes, feeding={k: getattr(config, k) for k in FEEDING},
                          explain=explain, explicit=bool(set(chosen) - {"layout", "pairs", "blocks"})
                          or not (isinstance(data, str) and data == PROBE_DATA))
    found = Sites(listed.sites)
    found.misses = listed.misses
    return found

