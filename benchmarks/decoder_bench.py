"""A Llama-style decoder block stack: what onnxaff costs per chunk at 1024, 2048 and 4096 tokens.

    python benchmarks/decoder_bench.py --work /tmp/llama                       # d 4096 → 11008, 4 blocks (3.2 GB)
    python benchmarks/decoder_bench.py --work /tmp/llama_small --width 256 --hidden 688 --heads 4 --tokens 1024

The model (onnx.helper, random seeded weights, saved with external data when it needs to be): `--blocks`
pre-norm decoder blocks of width d: RMSNorm (x·(mean x² + ε)^-1/2·g, decomposed as exporters write it) →
Q, K, V projections without bias → rotary embedding → causal softmax attention (the mask added as float32's
lowest value, as Hugging Face's Llama does) → output projection + residual; RMSNorm → SwiGLU MLP (gate, up:
d → hidden; SiLU(gate) = gate·Sigmoid(gate); ·up; down: hidden → d) + residual. The input is token
embeddings [N, T, d] with T = --seq (512), so 2048 tokens are 4 sequences and the softmax's D (its keys) stays
T whatever the token count.

onnxaff scores every token (`--reduce positions`): the MLP's SiLU sites have `tokens` rows of D = hidden. Of
a softmax's rows (one per query and head, D = T) the causal mask leaves the last query of each sequence and
head (every other row has keys no query before it reaches: docs/metrics.md#masked-positions), so each softmax
site is one partial chunk of N·heads rows. Per token count, three processes, run
a g b a g b …: (a) plain inference, (g) `onnxaff analyze` with a metric that scores nothing
(benchmarks/chunk_dump_plugin.py's noop_chunk: the augmented graph, feeding and chunk buffers), (b) the default
metrics (affinity, affinity_lw) and intervals. CPU seconds are user + system of each child (wait4); the
scoring's cost per chunk is (b − g) / chunks, chunks counted from (b)'s signature, per site kind.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from analysis_bench import child_usage, environment  # noqa: E402 (benchmarks/ is not a package)
from bench_models import _Graph  # noqa: E402


def decoder(width: int, hidden: int, heads: int, blocks: int, seq: int, seed: int = 0):
    """The decoder stack as an onnx ModelProto (its weights in memory: save it with `save`)."""
    from onnx import TensorProto, helper

    g = _Graph(seed)
    dh = width // heads
    inv = 1.0 / 10000.0 ** (np.arange(0, dh, 2) / dh)
    angles = np.arange(seq)[:, None] * inv[None, :]  # [T, dh/2], as Llama's rotary embedding
    cos = g.param(np.concatenate([np.cos(angles)] * 2, axis=1), "cos")
    sin = g.param(np.concatenate([np.sin(angles)] * 2, axis=1), "sin")
    # Above the diagonal float32's lowest value, as Hugging Face's Llama adds it (torch.finfo(dtype).min).
    causal = g.param(np.triu(np.full((seq, seq), np.finfo(np.float32).min, np.float32), 1), "causal_mask")
    half = g.ints([dh // 2, dh // 2], "halves")

    def rmsnorm(x):
        ms = g.op("ReduceMean", [g.op("Mul", [x, x]), g.ints([-1], "axes")], keepdims=1)
        r = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, g.param(np.array(1e-6), "eps")])])])
        return g.op("Mul", [g.op("Mul", [x, r]), g.param(np.ones(width), "rms_weight")])

    def proj(x, din, dout, gain=1.0):
        return g.op("MatMul", [x, g.param(g.rng.standard_normal((din, dout), np.float32) * (gain / math.sqrt(din)),
                                          "w")])

    def heads_split(x):  # [N, T, d] -> [N, H, T, dh]
        return g.op("Transpose", [g.op("Reshape", [x, g.ints([0, seq, heads, dh])])], perm=[0, 2, 1, 3])

    def rotary(x):
        a, b = g.name("rot_a"), g.name("rot_b")  # Split has two outputs: its node is written here
        g.nodes.append(helper.make_node("Split", [x, half], [a, b], name=a, axis=-1))
        rotated = g.op("Concat", [g.op("Neg", [b]), a], axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rotated, sin])])

    t = "embeds"
    for _ in range(blocks):
        a = rmsnorm(t)
        q, k = (rotary(heads_split(proj(a, width, width))) for _ in range(2))
        v = heads_split(proj(a, width, width))
        scores = g.op("Mul", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                              g.param(np.array(1.0 / math.sqrt(dh)), "scale")])
        w = g.op("Softmax", [g.op("Add", [scores, causal])], axis=-1)
        o = g.op("Transpose", [g.op("MatMul", [w, v])], perm=[0, 2, 1, 3])
        t = g.op("Add", [t, proj(g.op("Reshape", [o, g.ints([0, seq, width])]), width, width, gain=0.5)])
        m = rmsnorm(t)
        gate = proj(m, width, hidden)
        silu = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
        t = g.op("Add", [t, proj(g.op("Mul", [silu, proj(m, width, hidden)]), hidden, width, gain=0.5)], "h")
    graph = helper.make_graph(g.nodes, "llama_style_decoder",
                              [helper.make_tensor_value_info("embeds", TensorProto.FLOAT, ["N", seq, width])],
                              [helper.make_tensor_value_info(t, TensorProto.FLOAT, ["N", seq, width])], g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="onnxaff-bench")
    model.ir_version = 9
    return model


def save(model, path: Path) -> None:
    """One .onnx file, with the weights beside it (`<name>.data`) when they pass protobuf's 2 GB."""
    import onnx

    big = sum(len(t.raw_data) for t in model.graph.initializer) > 2**31 - 2**26
    onnx.save_model(model, path, save_as_external_data=big, all_tensors_to_one_file=True,
                    location=path.name + ".data", size_threshold=1024)
    onnx.checker.check_model(str(path), full_check=False)


def prepare(work: Path, args) -> tuple[Path, dict[int, Path]]:
    """The model and one embeddings .npy per token count, written once (in a child: see analysis_bench)."""
    tag = f"d{args.width}_h{args.hidden}_n{args.heads}_b{args.blocks}_t{args.seq}"  # every size the model has
    model = work / f"decoder_{tag}.onnx"
    if not model.exists():
        save(decoder(args.width, args.hidden, args.heads, args.blocks, args.seq), model)
    data = {}
    for tokens in args.tokens:
        data[tokens] = work / f"embeds_{tag}_{tokens}.npy"
        if not data[tokens].exists():  # seeded by the token count: the same file whichever others exist
            rng = np.random.default_rng(tokens)
            np.save(data[tokens], rng.standard_normal((tokens // args.seq, args.seq, args.width), np.float32))
    return model, data


def analyze(model: Path, data: Path, out: Path, batch: int, *options: str) -> list[str]:
    return [sys.executable, "-m", "onnxaff.cli", "analyze", str(model), "--data", str(data), "--batch-size",
            str(batch), "--reduce", "positions", "--device", "cpu", "--quiet", "--out", str(out), *options]


def chunks_by_kind(signature: Path) -> Counter:
    """Chunks scored per (site kind, D) in a signature."""
    kinds: Counter = Counter()
    for site in json.loads(signature.read_text())["sites"]:
        kinds[f"{site['kind']} D={site['dim']}"] += site.get("chunks") or 0
    return kinds


def timed_chunks(model: Path, data: dict[int, Path], args) -> None:
    """Each chunk's scoring CPU seconds (both metrics, scoring thread only), by token count and chunk shape."""
    print("\n| tokens | rows × D | chunks | CPU s per chunk: sum of the metrics' medians (each) |")
    print("|---:|---|---:|---|")
    for tokens in args.tokens:
        times = args.work / f"chunk_times_{tokens}.txt"
        times.unlink(missing_ok=True)
        env = dict(os.environ, ONNXAFF_CHUNK_TIMES=str(times))
        subprocess.run(analyze(model, data[tokens], args.work / f"timed_{tokens}.json", args.batch_size, "--plugin",
                               str(HERE / "chunk_timing_plugin.py"), "--metrics", "timed_affinity,timed_affinity_lw"),
                       check=True, env=env)
        by_shape: dict[tuple[int, int], dict[str, list[float]]] = {}
        for line in times.read_text().splitlines():
            metric, n, d, seconds = line.split()
            by_shape.setdefault((int(n), int(d)), {}).setdefault(metric, []).append(float(seconds))
        for (n, d), metrics in sorted(by_shape.items(), key=lambda kv: (-kv[0][1], -kv[0][0])):
            medians = {m: statistics.median(v) for m, v in sorted(metrics.items())}
            count = max(len(v) for v in metrics.values())
            print(f"| {tokens} | {n} × {d} | {count} | {sum(medians.values()):.3f} ("
                  + ", ".join(f"{m.removeprefix('timed_')} {v:.3f}" for m, v in medians.items()) + ") |", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="Folder for the model and the embeddings.")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=11008)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512, help="Tokens per sequence [512].")
    ap.add_argument("--tokens", type=lambda s: [int(v) for v in s.split(",")], default=[1024, 2048, 4096])
    ap.add_argument("--batch-size", type=int, default=2, help="Sequences per batch [2].")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--per-chunk", action="store_true", help="Instead: one run per token count with the default "
                    "metrics timed chunk by chunk on their scoring threads (chunk_timing_plugin.py).")
    ap.add_argument("--child-prepare", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if any(t % args.seq for t in args.tokens):
        raise SystemExit(f"every token count must be a multiple of --seq {args.seq}")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.child_prepare:
        prepare(args.work, args)
        return 0
    subprocess.run([sys.executable, __file__, "--child-prepare", *sys.argv[1:]], check=True)
    model, data = prepare(args.work, args)  # only paths now: everything exists
    print(f"# {environment('cpu')}")
    print(f"# {' '.join(sys.argv)}; model {model.name} ({model.stat().st_size / 2**20:.0f} MiB"
          f"{' + external data' if Path(str(model) + '.data').exists() else ''}), batch {args.batch_size} "
          f"sequences of {args.seq} tokens; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    plugin = str(HERE / "chunk_dump_plugin.py")
    if args.per_chunk:
        timed_chunks(model, data, args)
        return 0
    print("\n| tokens | (a) plain wall s / CPU s | (g) no scoring wall / CPU | (b) default metrics wall / CPU "
          "| (b) ÷ (a) wall | chunks | (b − g) CPU s per chunk | chunks by site |")
    print("|---:|---|---|---|---:|---:|---:|---|")
    for tokens in args.tokens:
        out = args.work / f"signature_{tokens}.json"
        runs = {"a": [sys.executable, str(HERE / "analysis_bench.py"), "--child-plain", str(model),
                      str(data[tokens]), str(args.batch_size), "cpu"],
                "g": analyze(model, data[tokens], args.work / f"noop_{tokens}.json", args.batch_size, "--plugin",
                             plugin, "--metrics", "noop_chunk"),
                "b": analyze(model, data[tokens], out, args.batch_size)}
        best: dict[str, tuple[float, float]] = {}
        for _ in range(args.repeats):
            for key, cmd in runs.items():
                wall, usage = child_usage(cmd)
                cpu = usage.ru_utime + usage.ru_stime
                if key not in best or cpu < best[key][1]:
                    best[key] = (wall, cpu)
        kinds = chunks_by_kind(out)
        n = sum(kinds.values())
        cells = " | ".join(f"{w:.1f} / {c:.1f}" for w, c in (best[k] for k in "agb"))
        cost = (best["b"][1] - best["g"][1]) / n if n else float("nan")
        print(f"| {tokens} | {cells} | {best['b'][0] / best['a'][0]:.2f} | {n} | {cost:.3f} | "
              f"{', '.join(f'{k}: {v}' for k, v in sorted(kinds.items()))} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
