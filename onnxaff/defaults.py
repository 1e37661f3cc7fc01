"""The analysis options' defaults, declared once: AnalysisConfig's fields and every function below it that takes
the same option read them from here (tests/test_defaults.py holds it), so a default changed here changes everywhere.
"""

LAYOUT = "auto"  # rank-3+ feature axis read off the graph (onnxaff.graph.layout)
SEED = 0  # every random draw (synthetic data, shuffles, half-samples, probes)
SAMPLE_RATE = 16000  # Hz an audio folder's files are resampled to (onnxaff.data.audio)
PACK = False  # text data: windows over all texts' tokens, no padding (onnxaff.data.text)
PAD = 0.0  # synthetic masks: the largest fraction of each example's last positions set to 0
PROGRESS = True
REDUCE = "sample:16"  # 16 seeded positions per example where a site has them, else its one row (graph.reduction;
# the default protocol: docs/statistics.md)
DEVICE = "auto"
GRAPH_OPTIMIZATION = "all"  # onnxruntime's graph optimisation level (onnxaff.runtime.sessions)
INTERVALS = "auto"  # how a site's ci95 is computed (onnxaff.collection.stats)
CHUNK_SIZE = "4d"  # rows per scored chunk: 4·D at a site of D features (chunks.site_chunk_rows; the paper: 512)
PROTOCOL = None  # a named protocol setting chunk size, reduction, metrics (onnxaff.format.protocol.NAMED); None: none
BATCH_SIZE = 64
REDUCE_IN = "graph"
MASK = "auto"
