"""`vkq bench lm`: text generation with SmolLM2-135M-Instruct beside PyTorch on the CPU, one run.

  vkq int8 (Vulkan)   the packaged LM (vkq.lm.packaged_lm: every linear int8 with per-token
                      activations, int8 embedding rows, the KV cache on the device)
  vkq int4 / 8da4w    the same with the GGUF's own Q4_1 blocks (float / per-token int8 activations)
  vkq int8 kv8        vkq int8 with the int8 KV cache (compile_lm(kv_cache="int8"): each token's key and
                      value rows of a head int8 with a float32 scale, vkq.ops.kv_q8)
  torch fp32 CPU      the same float model, eager, with transformers' StaticCache
  torch int8 CPU      torch.ao.quantization.quantize_dynamic of its linears (qint8), likewise

Per backend: prefill of a 128-token prompt (tok/s) and one decode step at positions 32, 256 and
1024 (tok/s: the step's wall time, median of repeats). vkq's decode records also give the
dispatches, barriers and submits of a step and its bandwidth fraction: the bytes the step's
dispatches read (each buffer once; the KV cache as far as the position) over the device's copy
bandwidth (the roofline's), divided by the step's time. Accuracy: teacher-forced over a real
text (Python's LICENSE history, >= 256 tokens): top-1 agreement of vkq's next-token argmax with
fp32 torch's, and both perplexities.
"""
from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np

from .records import Record, Settings, note
from .timing import stats_ms, wall_times

POSITIONS = (20, 32, 256, 400, 1024)     # 32, 256, 1024: the issue's; 20 and 400: its cache target
PROMPT = 128
CONTEXT = 2048


def real_text(min_tokens: int, tokenize) -> str:
    """A prose text of at least min_tokens tokens that ships with Python (its license's history)."""
    path = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    if len(tokenize(text)) < min_tokens:
        import this   # noqa: F401  (the Zen of Python, rot13 in the module)
        import codecs
        text += "\n" + codecs.decode(this.s, "rot13")
    return text


def _decode_bytes(lm, position: int) -> int:
    """Bytes a decode step's dispatches read at `position`, each buffer once: constants (packed
    weights, tables) whole, a state (KV cache) buffer as far as the position, an activation as
    its tensor at one token (its buffer is sized for the largest prompt), the kernels' scratch
    (a token's quantized row) not at all."""
    ex = lm._compiled.executor
    build = _step_build(lm)
    state = {id(ex.buffers[n]): ex.program.tensors[n].shape for n in ex.state_on_device}
    tensors = {}
    for name, buf in ex.buffers.items():
        if name in build.program.tensors and id(buf) not in state:
            words = build.program.tensors[name].device_words()
            tensors[id(buf)] = max(tensors.get(id(buf), 0), words * 4)
    scratch = {id(b) for b in ex._scratch.values()}
    seen, total = set(), 0
    for seg in build.segments:
        if seg[0] != "vulkan":
            continue
        for st in seg[1].steps:
            for b in st.reads:
                if id(b) in seen or id(b) in scratch:
                    continue
                seen.add(id(b))
                shape = state.get(id(b))
                total += (b.nbytes * min(position + 1, shape[2]) // shape[2] if shape is not None
                          else tensors.get(id(b), b.nbytes))
    return total


def _step_build(lm):
    ex = lm._compiled.executor
    sym = lm._token_symbol()
    return next(b for (key, _), b in reversed(ex._builds.items()) if dict(key).get(sym) == 1)


def run_lm(s: Settings, progress: bool = True) -> list:
    import torch
    from .. import lm as lm_mod, models
    records = []
    dev = s.device
    if s.quick:
        note(s, "lm: quick run: a 2-layer random Llama, not SmolLM2")
        lm, model = _tiny(dev)
        lms = [("vkq int8 (Vulkan)", lm), ("vkq int8 kv8 (Vulkan)", _tiny(dev, "int8")[0])]
    else:
        model, _ = models.load_smollm2()
        lms = [(f"vkq {label} (Vulkan)", lm_mod.packaged_lm("smollm2", CONTEXT, scheme, device=dev, progress=progress,
                                                             kv_cache=kv))
               for label, scheme, kv in SCHEMES]
    for backend, lm in lms:
        records += _vkq_records(s, backend, lm)
    lm = lms[0][1]
    positions = tuple(p for p in POSITIONS if p < lm.max_context - 1)
    prompt = _prompt(lm)
    for backend, m in (("torch fp32 CPU", model), ("torch int8 CPU", _torch_int8(model))):
        records += _torch_records(s, backend, m, prompt, positions, lm.max_context)
    for backend, lm in lms:
        records.append(_accuracy(s, backend, lm, model))
    return records


# (label, scheme, KV cache): SmolLM2's int8, the GGUF's int4 blocks, int8 with the int8 KV cache
SCHEMES = (("int8", "dynamic", "float32"), ("int4", "int4", "float32"), ("8da4w", "8da4w", "float32"),
           ("int8 kv8", "dynamic", "int8"))


def _prompt(lm) -> list:
    return [int(i) for i in np.random.default_rng(0).integers(3, lm.vocab_size, min(PROMPT, lm.max_context // 2))]


def _vkq_records(s, backend, lm) -> list:
    """Prefill and decode steps of one compiled LM."""
    records = []
    positions = tuple(p for p in POSITIONS if p < lm.max_context - 1)
    prompt = _prompt(lm)
    reps, warm = s.repeats, s.warmup

    def prefill():
        lm.reset()
        lm._run(prompt, 0, [len(prompt) - 1], False)
    t = wall_times(prefill, max(3, reps // 3), 1, s.budget_s)
    med, p90 = stats_ms(t)
    records.append(_rec(s, "prefill", len(prompt), backend, med, p90, len(prompt) / med * 1e3))
    copy = s.roof.get("copy_gbps")      # (bytes read + written a second: the roofline's copy)
    for pos in positions:
        t = wall_times(lambda: lm._run([5], pos, [0], False), reps, warm, s.budget_s)
        med, p90 = stats_ms(t)
        build = _step_build(lm)
        recs = [seg[1] for seg in build.segments if seg[0] == "vulkan"]
        nbytes = _decode_bytes(lm, pos)
        extra = {"dispatches": sum(len(r.steps) for r in recs), "barriers": sum(r.barriers for r in recs),
                 "submits": len(recs), "bytes_read": nbytes}
        if copy:
            extra["bandwidth_fraction"] = nbytes / (copy * 1e9) / (med / 1e3)
        records.append(_rec(s, f"decode@{pos}", 1, backend, med, p90, 1e3 / med, extra))
    return records


def _rec(s, name, tokens, backend, med, p90, tok_s, extra=None) -> Record:
    r = Record("lm", name, f"{tokens} token(s)", backend.split()[1], backend, s.name, med, p90)
    r.extra.update({"tok_s": tok_s, **(extra or {})})
    return r


def _tiny(dev, kv_cache: str = "float32"):
    import torch
    import transformers as T
    from tokenizers import Tokenizer, models as tm
    from ..lm_compile import compile_lm
    import tempfile
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))
    path = Path(tempfile.mkdtemp()) / "tokenizer.json"
    Tokenizer(tm.BPE(vocab={chr(33 + i): i for i in range(90)}, merges=[])).save(str(path))
    return compile_lm(model.eval(), str(path), max_context=64, device=dev, progress=False,
                      kv_cache=kv_cache), model.eval()


def _torch_int8(model):
    import copy
    import torch
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)


def _torch_records(s, backend, model, prompt, positions, context) -> list:
    import torch
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=context)
    out = []

    def step(ids, start):
        with torch.no_grad():
            model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True,
                  cache_position=torch.arange(start, start + len(ids)))

    def prefill():
        cache.reset()
        step(prompt, 0)
    t = wall_times(prefill, max(3, s.repeats // 3), 1, s.budget_s)
    med, p90 = stats_ms(t)
    out.append(_rec(s, "prefill", len(prompt), backend, med, p90, len(prompt) / med * 1e3))
    for pos in positions:
        t = wall_times(lambda: step([5], pos), s.repeats, s.warmup, s.budget_s)
        med, p90 = stats_ms(t)
        out.append(_rec(s, f"decode@{pos}", 1, backend, med, p90, 1e3 / med))
    return out


def accuracy(lm, model, text: str | None = None, tokens: int = 320) -> dict:
    """Teacher-forced over a real text: vkq's top-1 agreement with fp32 torch and both
    perplexities (the next token's mean negative log-likelihood, exponentiated)."""
    import torch
    if text is None:
        text = real_text(tokens, lambda t: lm.tokenizer.encode(t).ids)
    ids = lm.tokenizer.encode(text).ids[:min(tokens, lm.max_context)]
    got = lm.logits(ids)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].float().numpy()

    def ppl(logits):
        z = logits[:-1].astype(np.float64)
        z = z - z.max(-1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        return float(np.exp(-lp[np.arange(len(ids) - 1), ids[1:]].mean()))
    return {"tokens": len(ids), "top1_agreement": float((got.argmax(-1) == want.argmax(-1)).mean()),
            "perplexity": ppl(got), "perplexity_fp32": ppl(want)}


def _accuracy(s, backend, lm, model) -> Record:
    """Its time: the teacher-forced logits' call (wall clock, once)."""
    import time
    t = time.perf_counter()
    a = accuracy(lm, model)
    ms = (time.perf_counter() - t) * 1e3
    r = Record("lm", "accuracy", f"{a['tokens']} tokens", backend.split()[1], backend, s.name, ms, ms)
    r.extra.update(a)
    return r


def print_lm(records) -> None:
    """The lm suite as a table: tok/s a backend, vkq's dispatches and bandwidth fraction, accuracy."""
    rows = [r for r in records if r.get("suite") == "lm"]
    if not rows:
        return
    names = [n for n in dict.fromkeys(r["name"] for r in rows) if n != "accuracy"]
    backends = list(dict.fromkeys(r["backend"] for r in rows if r["name"] != "accuracy"))
    print("\ntext generation (tok/s)" + "".join(f"{b:>20}" for b in backends))
    for n in names:
        cells = {r["backend"]: r for r in rows if r["name"] == n}
        print(f"{n:23}" + "".join(f"{cells[b]['tok_s']:20.1f}" if b in cells else f"{'-':>20}" for b in backends))
        for b in backends:
            v = cells.get(b, {})
            if "dispatches" in v:
                print(f"    {b}: {v['dispatches']} dispatches, {v['barriers']} barriers, {v['submits']} submit(s), "
                      f"{v['bytes_read'] / 2**20:.1f} MiB read, {v.get('bandwidth_fraction', float('nan')):.2f} of copy "
                      "bandwidth")
    for r in rows:
        if r["name"] == "accuracy":
            print(f"{r['backend']}: over {r['tokens']} tokens of real text, top-1 agreement with fp32 "
                  f"{r['top1_agreement']:.3f}; perplexity {r['perplexity']:.3f} (fp32 {r['perplexity_fp32']:.3f})")
