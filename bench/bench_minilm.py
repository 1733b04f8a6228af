"""all-MiniLM-L6-v2 sentence embeddings: per-sentence latency of vkq on Vulkan beside PyTorch on
the CPU, measured in the same run, and where the Vulkan time goes; or (--throughput N)
sentences per second over N real sentences of 5 to 128 tokens.

    .venv/bin/python bench/bench_minilm.py [--device llvmpipe] [--lengths 16,128] [--reps 10]
                                           [--schemes dynamic,weight_only]
    .venv/bin/python bench/bench_minilm.py --throughput 300 [--batch 8] [--device llvmpipe]

Throughput rows (the same sentences, sorted by length and run --batch at a time):
  torch fp32          MeanPooledEncoder on the CPU, each batch padded to its longest sentence
  vkq dynamic         one program with dynamic batch and length, each batch at its own length
  vkq padded 16/128   the same program, every batch padded to 16 or 128 tokens (what vkq did
                      before dynamic shapes: one static program per length)
with the first call at a new shape and the device memory planned for the bounds. The
sentences are sentences of the Python standard library's docstrings (real English, no download),
picked to spread evenly over 5..128 tokens.

Rows (batch 1, one sentence padded to L tokens; wall clock per call, median and best of --reps
after two warm-up calls):
  torch fp32          MeanPooledEncoder (BertModel + mean pooling + L2 norm), torch.no_grad,
                      with 1 thread and with all cores (OpenMP spins badly when another process
                      holds a core: on a shared machine the 1-thread row is the stable one)
  torch int8 dyn      the same after torch.ao.quantization.quantize_dynamic({nn.Linear}, qint8):
                      x86 dynamic linears, activations quantized per tensor
  vkq <scheme>        the compiled program on the Vulkan device (CPU prefix + one segment)
Then, for each vkq program, one run recorded with Vulkan timestamps around every dispatch
and transfer (the segment re-recorded with timestamps=True; the executor's own recording has
none): GPU time by kind of dispatch (linear = linear_rowq + linear_q8 / linear_float; the
float shaders by name), the upload and download, and the CPU prefix's wall time. The last
column gives each row's cosine with torch fp32 on one fixed sentence.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch                                                              # noqa: E402

from vkq import models                                                    # noqa: E402
from vkq.registry import get_op                                           # noqa: E402
from vkq.transformer import MeanPooledEncoder, compile_encoder, tokenize  # noqa: E402

SENTENCE = ("The quick brown fox jumps over the lazy dog while a group of children watch from the old "
            "stone bridge near the river, laughing at the dog that does not even bother to wake up.")


def timed(fn, reps):
    fn()
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, min(times) * 1e3


def cosine(a, b):
    a, b = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def breakdown(prog, ids, mask):
    """(GPU ms by kind, upload ms, download ms, CPU prefix ms) of one run."""
    ex = prog.executor
    vk = [s for s in ex.segments if s[0] == "vulkan"]
    if len(vk) != 1:
        print(f"  ({len(vk)} Vulkan segments; timing the largest)")
    _, rec, ups, downs, nodes = max(vk, key=lambda s: len(s[4]))
    timed_rec = ex.device.record(rec.steps, [ex.buffers[t] for t in ups], [ex.buffers[t] for t in downs],
                                 timestamps=True)
    host = ex(ids, mask, keep_all=True)   # fills the host copies the segment uploads
    for t in ups:
        ex.buffers[t].write(ex.program.tensors[t].to_device(host[t]))
    start = time.perf_counter()
    for seg in ex.segments:
        if seg[0] == "cpu":
            node = seg[1]
            args = [host[t] if t in host else ex.program.constants[t] for t in node.inputs]
            get_op(node.op).reference(*args, **node.attrs)
    prefix_ms = (time.perf_counter() - start) * 1e3
    timed_rec.run()
    # ns -> ms (timestampPeriod 1 on CPU drivers)
    up_ms, down_ms = (t / 1e6 for t in timed_rec.transfer_times_ns())
    kinds = defaultdict(float)
    for step, ns in zip(timed_rec.steps, timed_rec.dispatch_times_ns()):
        name = step.name
        kind = "linear" if name.startswith("linear") else name.replace("float_", "")
        kinds[kind] += ns / 1e6
    return dict(kinds), up_ms, down_ms, prefix_ms, len(timed_rec.steps)


def corpus(tokenizer, n: int, lo: int = 5, hi: int = 128, seed: int = 0) -> list[str]:
    """n sentences of lo..hi tokens, spread evenly over that range: sentences (and runs of
    consecutive sentences, for the long end) of the standard library's docstrings."""
    import inspect
    import random
    import re
    import importlib
    texts = []
    skip = {"this", "antigravity", "idlelib", "tkinter", "turtle", "turtledemo"}   # print, open a browser, need Tk
    for mod in sorted(m for m in sys.stdlib_module_names if not m.startswith("_") and m not in skip):
        try:
            module = importlib.import_module(mod)
        except Exception:       # a module that does not import here: skip it
            continue
        for _, obj in inspect.getmembers(module):
            doc = inspect.getdoc(obj) if callable(obj) else None
            if doc and getattr(obj, "__module__", None) == mod:
                texts.append(" ".join(doc.split()))
    sentences = []
    for text in texts:
        parts = [p for p in re.split(r"(?<=[.!?])\s+", text)
                 if len(p.split()) >= 3 and re.fullmatch(r"[A-Za-z0-9 ,.;:'\"()!?-]+", p)]   # prose, not code
        for k in (1, 2, 4, 8):          # runs of k sentences reach the long lengths
            sentences += [" ".join(parts[i:i + k]) for i in range(0, len(parts) - k + 1, k)]
    sentences = sorted(set(sentences))
    counts = [len(ids) for ids in tokenizer(sentences)["input_ids"]]
    rng = random.Random(seed)
    bins = [[s for s, c in zip(sentences, counts) if a <= c < min(a + 8, hi + 1)] for a in range(lo, hi + 1, 8)]
    bins = [rng.sample(b, len(b)) for b in bins if b]      # each bin shuffled, drawn without repeats
    out, k = [], 0
    while len(out) < n:
        for b in bins:
            if len(out) < n:
                out.append(b[k % len(b)])
        k += 1
    rng.shuffle(out)
    return out


def throughput(args):
    from vkq.transformer import VulkanSentenceEncoder
    tokenizer, bert = models.load_minilm()
    sentences = corpus(tokenizer, args.throughput)
    counts = [len(ids) for ids in tokenizer(sentences)["input_ids"]]
    print(f"{len(sentences)} sentences, {min(counts)}..{max(counts)} tokens (mean {np.mean(counts):.1f}); "
          f"batch {args.batch}; device {args.device}; torch {torch.get_num_threads()} threads")
    fp32 = MeanPooledEncoder(bert).eval()
    enc = VulkanSentenceEncoder("dynamic", device=args.device, batch=args.batch, max_length=128,
                                bert=bert, tokenizer=tokenizer)
    start = time.perf_counter()
    prog = enc.program
    prog.executor
    print(f"compile (export, quantize, lower, verify) and build at the bounds: {time.perf_counter() - start:.1f} s; "
          f"device memory: arena {prog.executor.memory['arena_bytes'] / 2**20:.1f} MiB for batch <= "
          f"{prog.program.symbols and max(h for _, h in prog.program.symbols.values())} tokens/rows")
    padded = VulkanSentenceEncoder("dynamic", device=args.device, batch=args.batch, lengths=(16, 128),
                                   bert=bert, tokenizer=tokenizer)
    padded._program = prog
    ids, mask = tokenize(tokenizer, ["a new shape"] * 3, 37)
    t = time.perf_counter()
    prog(ids, mask)
    first = time.perf_counter() - t
    t = time.perf_counter()
    prog(ids, mask)
    again = time.perf_counter() - t
    print(f"first call at a new shape (3 x 37): {first * 1e3:.0f} ms; the same shape again: {again * 1e3:.0f} ms")

    def torch_run():
        with torch.no_grad():
            for part, length in enc.batches(sentences):
                i, m = tokenize(tokenizer, [sentences[k] for k in part], length)
                fp32(torch.from_numpy(i), torch.from_numpy(m))
    rows = [("torch fp32 (CPU, batch at its longest)", torch_run),
            ("vkq dynamic (Vulkan, batch at its longest)", lambda: enc.embed(sentences)),
            ("vkq padded to 16/128 (Vulkan)", lambda: padded.embed(sentences))]
    enc.embed(sentences)     # every shape built once: compilation is not throughput
    padded.embed(sentences)
    print(f"{'':<44} {'s':>8} {'sentences/s':>12}")
    for name, fn in rows:
        best = min(_wall(fn) for _ in range(args.reps_throughput))
        print(f"{name:<44} {best:>8.2f} {len(sentences) / best:>12.1f}", flush=True)
    ref = enc.torch_embed(sentences[:16])
    got = enc.embed(sentences[:16])
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    print(f"cosine with torch fp32 (16 sentences): min {cos.min():.5f}")


def _wall(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="llvmpipe")
    ap.add_argument("--lengths", default="16,128")
    ap.add_argument("--schemes", default="dynamic,weight_only")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--throughput", type=int, default=0, help="sentences/s over this many sentences instead")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps-throughput", type=int, default=2)
    args = ap.parse_args(argv)
    if args.throughput:
        return throughput(args)
    lengths = [int(x) for x in args.lengths.split(",")]
    schemes = args.schemes.split(",")

    tokenizer, bert = models.load_minilm()
    fp32 = MeanPooledEncoder(bert).eval()
    with torch.no_grad():
        int8 = torch.ao.quantization.quantize_dynamic(copy.deepcopy(fp32), {torch.nn.Linear}, dtype=torch.qint8)
    cores = torch.get_num_threads()
    print(f"torch {torch.__version__}, quantized engine {torch.backends.quantized.engine}; vkq device {args.device}")
    print(f"{'L':>4} {'backend':<24} {'median ms':>10} {'best ms':>9} {'cos vs fp32':>12}")
    details = []
    for L in lengths:
        ids, mask = tokenize(tokenizer, [SENTENCE], L)
        tid, tmask = torch.from_numpy(ids), torch.from_numpy(mask)
        with torch.no_grad():
            ref = fp32(tid, tmask).numpy()
            for threads in sorted({1, cores}):
                torch.set_num_threads(threads)
                for name, model in (("torch fp32", fp32), ("torch int8 dyn", int8)):
                    med, best = timed(lambda: model(tid, tmask), args.reps)
                    name = f"{name} (CPU, {threads}t)"
                    print(f"{L:>4} {name:<24} {med:>10.2f} {best:>9.2f} "
                          f"{cosine(model(tid, tmask).numpy(), ref):>12.6f}", flush=True)
            torch.set_num_threads(cores)
        for scheme in schemes:
            prog = compile_encoder(bert, tokenizer, L, scheme, device=args.device)
            prog(ids, mask)   # builds the executor
            med, best = timed(lambda: prog(ids, mask), args.reps)
            print(f"{L:>4} {'vkq ' + scheme + ' (Vulkan)':<24} {med:>10.2f} {best:>9.2f} "
                  f"{cosine(prog(ids, mask), ref):>12.6f}", flush=True)
            details.append((L, scheme, breakdown(prog, ids, mask)))
    print(f"\nWhere the Vulkan time goes (one run, Vulkan timestamps, device {args.device}):")
    for L, scheme, (kinds, up, down, prefix, n) in details:
        gpu = sum(kinds.values())
        rest = gpu - kinds.get("linear", 0.0)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))
        print(f"  L={L} {scheme}: {n} dispatches, GPU {gpu:.2f} ms = linear {kinds.get('linear', 0):.2f} "
              f"({100 * kinds.get('linear', 0) / gpu:.0f}%) + rest {rest:.2f}; upload {up:.3f} ms, "
              f"download {down:.3f} ms; CPU prefix {prefix:.2f} ms\n    by shader (ms): {parts}")


if __name__ == "__main__":
    main()
