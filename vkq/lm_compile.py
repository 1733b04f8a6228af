"""A Hugging Face causal LM -> one vkq program that prefills and decodes over a KV cache kept
on the device (vkq.lm runs it, without torch).

    lm = vkq.compile_lm(hf_model, tokenizer, max_context=512, scheme="dynamic")

What is exported (CachedDecoder): forward(ids (1, T), positions (T,), logit_index (K,)) ->
(logits (K, vocab), next_token (1,)), T and K dynamic in [1, max_context]. A prompt is one call
with T = its length and K = 1 (the last position's logits only); a decode step T = K = 1;
teacher-forced logits K = T. next_token is the argmax of the last logits row, on the device:
greedy decoding takes one int32 back a step.
The cache is two buffers a layer, (1, kv heads, max_context, head_dim) float32 (kv_cache="int8":
rows of int8 values and a float32 scale, vkq.ops.kv_q8), written in place
(index_copy_ at the positions): vkq makes them program state (vkq.passes.functionalize,
Program.state), kept on the device and written a row a step. Attention runs through a
transformers attention function of our own ("vkq", registered with transformers'
AttentionInterface) that writes the new keys and values into the cache and calls
vkq::cached_attention: the new queries over the cache's filled prefix only (rows up to each
query's position, a sliding window where the layer has one, Gemma 2's softcap), its grouped KV
heads indexed, not repeated (vkq.ops.attention_cached). With an attention implementation
transformers has no mask function for, the model builds no mask: the positions are the mask.
Any decoder whose attention layers call transformers' attention interface with
(module, query, key, value, ...) after their rotary embedding compiles this way (Llama, Qwen2/3,
Mistral, Phi-3, Gemma 1/2/3, ...).
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np
import torch
from torch import nn

ATTENTION = "vkq"
_CONTEXT = threading.local()      # the CachedDecoder being run: its positions and cache buffers


@torch.library.custom_op("vkq::cached_attention", mutates_args=())
def cached_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor,
                     scale: float, window: int, softcap: float) -> torch.Tensor:
    """q (B, H, T, D) over the caches (B, Hkv, N, D|Dv) at positions (T,): each query attends rows
    lo..positions[t] (lo = positions[t] - window + 1 with a window), heads grouped. The eager
    computation (calibration, PT2E's reference); vkq.ops.attention_cached is its specification."""
    B, H, T, _ = q.shape
    hkv = k_cache.shape[1]
    top = int(positions.max()) + 1 if positions.numel() else 0
    k = k_cache[:, :, :top].repeat_interleave(H // hkv, dim=1).float()
    v = v_cache[:, :, :top].repeat_interleave(H // hkv, dim=1).float()
    s = torch.matmul(q.float(), k.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    j = torch.arange(top, device=q.device)
    p = positions.reshape(T, 1)
    keep = j[None, :] <= p
    if window:
        keep &= j[None, :] > p - window
    s = s.masked_fill(~keep, float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), v).to(q.dtype)


@cached_attention.register_fake
def _(q, k_cache, v_cache, positions, scale, window, softcap):
    return q.new_empty((*q.shape[:-1], v_cache.shape[-1]))


@torch.library.custom_op("vkq::kv_quantize", mutates_args=())
def kv_quantize(x: torch.Tensor) -> torch.Tensor:
    """Rows (..., D) float32 -> int32 words (..., ceil(D/4) + 1): int8 values and a float32 scale
    a row, the int8 KV cache's format (vkq.ops.kv_q8, whose reference this runs eagerly)."""
    from .ops.kv_q8 import kv_quantize as quantize
    return torch.from_numpy(quantize(x.detach().float().contiguous().numpy()))


@kv_quantize.register_fake
def _(x):
    from .ops.kv_q8 import row_words
    return x.new_empty((*x.shape[:-1], row_words(x.shape[-1])), dtype=torch.int32)


@torch.library.custom_op("vkq::index_copy_q8", mutates_args=())
def index_copy_q8(cache: torch.Tensor, dim: int, index: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """cache.index_copy(dim, index, kv_quantize(x)): what vkq.passes.fuse_kv_write makes of the
    int8 cache's writes (vkq.ops.kv_q8.index_copy_q8, one dispatch)."""
    return cache.index_copy(dim, index, kv_quantize(x))


@index_copy_q8.register_fake
def _(cache, dim, index, x):
    return torch.empty_like(cache)


@torch.library.custom_op("vkq::cached_attention_q8", mutates_args=())
def cached_attention_q8(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor,
                        scale: float, window: int, softcap: float, dv: int) -> torch.Tensor:
    """cached_attention over int8 caches of kv_quantize's rows (B, Hkv, N, ceil(D/4) + 1), values
    of dv: vkq.ops.attention_cached.attention_cached_q8, run eagerly."""
    from .ops.attention_cached import attention_cached_q8 as attend
    out = attend(q.detach().float().numpy(), k_cache.numpy(), v_cache.numpy(), positions.numpy(),
                 scale=scale, window=window, softcap=softcap, dv=dv)
    return torch.from_numpy(out).to(q.dtype)


@cached_attention_q8.register_fake
def _(q, k_cache, v_cache, positions, scale, window, softcap, dv):
    return q.new_empty((*q.shape[:-1], dv))


@torch.library.custom_op("vkq::rotary", mutates_args=())
def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, D) * cos + rotate_half(x) * sin, cos / sin (B, T, D) shared by the heads: what
    transformers' apply_rotary_pos_emb computes for one of q, k (vkq.ops.rotary, one dispatch)."""
    half = x.shape[-1] // 2
    return x * cos.unsqueeze(1) + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin.unsqueeze(1)


@rotary.register_fake
def _(x, cos, sin):
    return x.new_empty(x.shape)


def _rotary_like(apply):
    """apply_rotary_pos_emb routed through vkq::rotary where it is the full rotation of the head
    (cos as wide as the head, heads at dim 1), else the model's own."""
    def routed(q, k, cos, sin, *args, unsqueeze_dim=1, **kwargs):
        if args or kwargs or unsqueeze_dim != 1 or cos.dim() != 3 or cos.shape[-1] != q.shape[-1] \
                or q.shape[-1] != k.shape[-1] or q.shape[-1] % 2:
            return apply(q, k, cos, sin, *args, unsqueeze_dim=unsqueeze_dim, **kwargs)
        return torch.ops.vkq.rotary(q, cos, sin), torch.ops.vkq.rotary(k, cos, sin)
    return routed


def _computes_rotary(apply) -> bool:
    """Whether a model's apply_rotary_pos_emb gives vkq::rotary's values, bit for bit, on a probe."""
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 3, 5, 8, generator=g), torch.randn(1, 1, 5, 8, generator=g)
    cos, sin = torch.randn(1, 5, 8, generator=g), torch.randn(1, 5, 8, generator=g)
    try:
        a, b = apply(q, k, cos, sin)
    except Exception:
        return False
    return torch.equal(a, rotary(q, cos, sin)) and torch.equal(b, rotary(k, cos, sin))


@contextlib.contextmanager
def rotary_routed(model: nn.Module):
    """While exporting: each modeling module's apply_rotary_pos_emb that computes vkq::rotary's
    values routed through it (one dispatch for q, one for k, instead of seven each)."""
    import sys
    patched = []
    for name in {type(m).__module__ for m in model.modules()}:
        module = sys.modules.get(name)
        apply = getattr(module, "apply_rotary_pos_emb", None)
        if apply is not None and _computes_rotary(apply):
            module.apply_rotary_pos_emb = _rotary_like(apply)
            patched.append((module, apply))
    try:
        yield
    finally:
        for module, apply in patched:
            module.apply_rotary_pos_emb = apply


@contextlib.contextmanager
def rotary_tables(model: nn.Module, max_context: int):
    """While exporting: each rotary embedding module (forward(x, position_ids) -> cos, sin) whose
    values depend on the position alone gathers its rows from a table of positions
    0..max_context-1 that the module itself computed once, instead of computing cos and sin of
    position x frequency in the graph: a gather gives the reference's bits on every device
    (Vulkan leaves cos / sin's precision to the driver), and five dispatches a step go. Kept
    where a probe of a few positions gives the module's own values; a rope whose frequencies
    follow the sequence length (dynamic NTK, longrope) keeps its own."""
    patched = []
    positions = torch.arange(max_context)[None]
    for m in model.modules():
        rope = str(getattr(m, "rope_type", "default"))
        if not type(m).__name__.endswith("RotaryEmbedding") or not hasattr(m, "inv_freq") \
                or "dynamic" in rope or "longrope" in rope:
            continue
        x = torch.zeros(1, dtype=torch.float32)
        try:
            with torch.no_grad():
                cos, sin = m(x, positions)
        except Exception:
            continue
        if cos.shape != sin.shape or cos.dim() != 3 or cos.shape[:2] != (1, max_context):
            continue
        m.register_buffer("vkq_cos_table", cos[0].float().contiguous(), persistent=False)
        m.register_buffer("vkq_sin_table", sin[0].float().contiguous(), persistent=False)
        own = m.forward

        def gathered(x, position_ids, *args, _m=m, _own=own, **kwargs):
            if args or kwargs or position_ids.dim() != 2 or position_ids.shape[0] != 1:
                return _own(x, position_ids, *args, **kwargs)
            at = position_ids[0]
            return _m.vkq_cos_table[at][None].to(x.dtype), _m.vkq_sin_table[at][None].to(x.dtype)
        probe = torch.tensor([[0, 1, 7, max_context - 1]])
        with torch.no_grad():
            a, b = gathered(x, probe), own(x, probe)
        if not all(torch.allclose(u, v, rtol=0, atol=1e-6) for u, v in zip(a, b)):
            del m.vkq_cos_table, m.vkq_sin_table
            continue
        m.forward = gathered
        patched.append((m, own))
    try:
        yield
    finally:
        for m, own in patched:
            m.forward = own
            del m.vkq_cos_table, m.vkq_sin_table


def vkq_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, sliding_window=None,
                  softcap=None, **kwargs):
    """transformers' attention interface: the new keys and values written into the layer's cache
    at the positions, then attention over the cache. Returns (B, T, H, Dv) as transformers'
    own functions do."""
    lm = getattr(_CONTEXT, "lm", None)
    if lm is None:
        raise RuntimeError("the 'vkq' attention runs inside vkq.lm_compile.CachedDecoder only")
    i = module.layer_idx
    k_cache, v_cache = lm.caches(i)
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    window, cap = int(sliding_window or 0), float(softcap or 0.0)
    if lm.kv_cache == "int8":         # each new row int8 with its scale, written as the float rows are
        k_cache.index_copy_(2, _CONTEXT.positions, torch.ops.vkq.kv_quantize(key.float()))
        v_cache.index_copy_(2, _CONTEXT.positions, torch.ops.vkq.kv_quantize(value.float()))
        out = torch.ops.vkq.cached_attention_q8(query, k_cache, v_cache, _CONTEXT.positions, scale, window, cap,
                                                value.shape[-1])
    else:
        k_cache.index_copy_(2, _CONTEXT.positions, key.to(k_cache.dtype))
        v_cache.index_copy_(2, _CONTEXT.positions, value.to(v_cache.dtype))
        out = torch.ops.vkq.cached_attention(query, k_cache, v_cache, _CONTEXT.positions, scale, window, cap)
    return out.transpose(1, 2).contiguous(), None


def _register():
    from transformers import AttentionInterface
    AttentionInterface.register(ATTENTION, vkq_attention)


def model_shape(config) -> dict:
    """Layers, KV heads and head size of a transformers decoder config (a multimodal model's
    text_config)."""
    config = getattr(config, "text_config", None) or config
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {"layers": config.num_hidden_layers, "kv_heads": kv, "head_dim": head_dim, "heads": heads,
            "vocab": config.vocab_size}


KV_CACHES = ("float32", "int8")


def cache_shape(shape: dict, max_context: int, kv_cache: str) -> tuple:
    """One layer's key (and value) cache: (1, kv heads, max_context, head_dim) float32, or int8
    rows of ceil(head_dim / 4) Int8x4 words and a float32 scale (vkq.ops.kv_q8) as int32 words."""
    from .ops.kv_q8 import row_words
    width = shape["head_dim"] if kv_cache == "float32" else row_words(shape["head_dim"])
    return 1, shape["kv_heads"], max_context, width


class CachedDecoder(nn.Module):
    """forward(ids (1, T), positions (T,), logit_index (K,)) -> (logits (K, V), next_token (1,))
    over a static KV cache kept in this module's buffers (written in place)."""

    def __init__(self, model: nn.Module, max_context: int, kv_cache: str = "float32"):
        super().__init__()
        self.model = model
        self.kv_cache = kv_cache
        shape = model_shape(model.config)
        self.n_layers = shape["layers"]
        dtype = torch.float32 if kv_cache == "float32" else torch.int32
        for i in range(self.n_layers):
            for kind in "kv":
                self.register_buffer(f"{kind}_cache_{i}", torch.zeros(cache_shape(shape, max_context, kv_cache),
                                                                       dtype=dtype), persistent=False)

    def caches(self, i: int):
        return getattr(self, f"k_cache_{i}"), getattr(self, f"v_cache_{i}")

    def forward(self, ids, positions, logit_index):
        _CONTEXT.lm, _CONTEXT.positions = self, positions
        try:
            hidden = self.model.get_decoder()(input_ids=ids, position_ids=positions[None],
                                              use_cache=False).last_hidden_state
        finally:
            _CONTEXT.lm = None
        logits = self.model.get_output_embeddings()(hidden[0][logit_index])    # the rows asked for only
        config = getattr(self.model.config, "text_config", None) or self.model.config
        if getattr(config, "final_logit_softcapping", None):                    # Gemma 2 / 3
            cap = config.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        if getattr(config, "logit_scale", None) not in (None, 1.0):             # Cohere
            logits = logits * config.logit_scale
        return logits, torch.argmax(logits[-1:], dim=-1).to(torch.int32)


@contextlib.contextmanager
def vkq_attention_on(model: nn.Module):
    """The model's attention implementation set to "vkq" while exporting, then as it was."""
    _register()
    before = model.config._attn_implementation
    model.set_attn_implementation(ATTENTION)
    try:
        yield
    finally:
        model.set_attn_implementation(before)


def tokenizer_json(tokenizer) -> str:
    """A tokenizer as the `tokenizers` package's JSON: a transformers (fast) tokenizer, a
    tokenizers.Tokenizer, or a path to a tokenizer.json."""
    from pathlib import Path
    if isinstance(tokenizer, (str, Path)):
        path = Path(tokenizer)
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {path}")
        return path.read_text(encoding="utf-8")
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None) or tokenizer
    if not hasattr(backend, "to_str"):
        raise TypeError(f"{type(tokenizer).__name__} is not a tokenizer vkq can store: pass a transformers fast "
                        "tokenizer, a tokenizers.Tokenizer or the path of a tokenizer.json")
    return backend.to_str()


def lm_meta(model: nn.Module, tokenizer, max_context: int) -> dict:
    """What the runner needs besides the program: the tokenizer, BOS/EOS, the chat template,
    the context length (all from the model's config and tokenizer)."""
    from tokenizers import Tokenizer
    config = model.config
    text = getattr(config, "text_config", None) or config
    js = tokenizer_json(tokenizer)
    vocab = Tokenizer.from_str(js).get_vocab_size(with_added_tokens=True)
    if vocab > text.vocab_size:
        raise ValueError(f"the tokenizer has {vocab} tokens, the model's vocabulary {text.vocab_size}: "
                         "they do not belong together")
    gen = getattr(model, "generation_config", None)
    eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    eos = eos if eos is not None else getattr(config, "eos_token_id", None)
    eos = getattr(tokenizer, "eos_token_id", None) if eos is None else eos
    bos = getattr(config, "bos_token_id", None)
    template = getattr(tokenizer, "chat_template", None)
    return {"tokenizer": js, "max_context": int(max_context), "vocab_size": int(text.vocab_size),
            "bos_token_id": None if bos is None else int(bos),
            "eos_token_ids": sorted({int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])
                                     if e is not None}),
            "add_bos": bool(getattr(tokenizer, "add_bos_token", False)),
            "chat_template": template if isinstance(template, str) else None,
            "architecture": type(model).__name__, **model_shape(config)}


def _prompt(sample, tokenizer, max_context: int) -> tuple:
    """A calibration sample (a text or token ids) as CachedDecoder's inputs: one prompt.
    tokenizer: a tokenizers.Tokenizer."""
    if isinstance(sample, str):
        ids = tokenizer.encode(sample).ids
    else:
        ids = [int(i) for i in sample]
    ids = ids[:max_context] or [0]
    return torch.tensor([ids]), torch.arange(len(ids)), torch.tensor([len(ids) - 1])


PORTABLE_BUFFER_BYTES = 1 << 27      # Vulkan's least maxStorageBufferRange (llvmpipe's): 128 MiB


def logit_rows(max_context: int, vocab: int) -> int:
    """Rows of logits one call may return: a (rows, vocab) float32 tensor within one storage
    buffer on every device (lm.logits runs longer texts a chunk at a time over the cache)."""
    return max(1, min(max_context, PORTABLE_BUFFER_BYTES // (4 * vocab)))


SCHEMES = ("dynamic", "weight_only", "static", "int4", "8da4w")


def compile_lm(hf_model: nn.Module, tokenizer, max_context: int = 512, scheme: str = "dynamic", device=None,
               progress: bool = True, meta: dict | None = None, calibration=None, group_size: int = 32,
               symmetric: bool = True, known_groups: dict | None = None, int4_lm_head: bool = False,
               kv_cache: str = "float32"):
    """Compile a transformers causal LM with a static KV cache of max_context positions; every
    linear int8 (scheme "dynamic": per-token activations; "weight_only"; "static": per-tensor
    activations, their ranges from `calibration`, texts or token-id lists run as prompts) or int4
    in groups of group_size ("int4": float activations; "8da4w": per-token int8 ones; known_groups:
    a GGUF's own blocks for the weights they dequantize to, vkq.models.gguf_llama; the lm_head
    stays int8 by rows unless int4_lm_head: its logits decide every token, and a tied one is then
    the embedding's own int8 table), the
    token embedding as int8 rows (tied to the lm_head: stored once). kv_cache: "float32", or
    "int8" (each token's key and value rows of a head int8 with a float32 scale: vkq.ops.kv_q8,
    about a quarter of the cache's bytes and of attention's reads). The model given is not
    changed (a half-precision one is compiled from a float32 copy). Returns a vkq.lm.LanguageModel."""
    import vkq
    from torch.export import Dim
    from .api import compile as _compile
    from .lm import LanguageModel
    vkq._quiet_third_party_logs()
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if kv_cache not in KV_CACHES:
        raise ValueError(f"kv_cache must be one of {', '.join(KV_CACHES)}, got {kv_cache!r}")
    max_context = int(max_context)
    if max_context < 4:
        raise ValueError(f"max_context must be at least 4, got {max_context}")
    info = {**lm_meta(hf_model, tokenizer, max_context), "kv_cache": kv_cache, **(meta or {})}
    model = hf_model.eval()
    if any(p.dtype != torch.float32 for p in model.parameters()):
        import copy
        model = copy.deepcopy(model).float()
    decoder = CachedDecoder(model, max_context, kv_cache).eval()
    example = (torch.tensor([[1, 2, 3]]), torch.arange(3), torch.tensor([1, 2]))
    info["max_logit_rows"] = logit_rows(max_context, info["vocab"])
    if scheme in ("int4", "8da4w") and not int4_lm_head:      # the lm_head int8 by rows (the embedding's table)
        import hashlib
        head = model.get_output_embeddings().weight.detach().float().numpy()
        known_groups = {**(known_groups or {}), hashlib.sha1(np.ascontiguousarray(head).tobytes()).hexdigest(): "int8"}
    t, k = Dim("tokens", min=1, max=max_context), Dim("logits", min=1, max=info["max_logit_rows"])
    if calibration is not None:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_str(info["tokenizer"])
        calibration = [_prompt(c, tok, max_context) for c in calibration]
    with vkq_attention_on(model), rotary_routed(model), rotary_tables(model, max_context), torch.no_grad():
        program, _ = _compile(decoder, example, calibration, scheme, dynamic_shapes=({1: t}, {0: t}, {0: k}),
                              progress=progress, int8_embeddings=True,
                              **({"group_size": group_size, "symmetric": symmetric, "known_groups": known_groups}
                                 if scheme in ("int4", "8da4w") else {}))
    program.meta["lm"] = info
    return LanguageModel(program, device)
