"""all-MiniLM-L6-v2 sentence embeddings: per-sentence latency of vkq on Vulkan beside PyTorch on
the CPU, measured in the same run, and where the Vulkan time goes.

    .venv/bin/python bench/bench_minilm.py [--device llvmpipe] [--lengths 16,128] [--reps 10]
                                           [--schemes dynamic,weight_only]

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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="llvmpipe")
    ap.add_argument("--lengths", default="16,128")
    ap.add_argument("--schemes", default="dynamic,weight_only")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
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
