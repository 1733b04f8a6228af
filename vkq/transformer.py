"""Sentence embeddings from a BERT encoder on Vulkan (all-MiniLM-L6-v2 by default).

    enc = VulkanSentenceEncoder(scheme="dynamic", device="llvmpipe")
    emb = enc.embed(["A man is eating food.", ...])    # (N, 384) float32, unit length
    ref = enc.torch_embed([...])                       # the fp32 PyTorch embeddings

The exported model is MeanPooledEncoder: BertModel -> mean of the last hidden states over the
attention mask -> L2 normalisation (what sentence-transformers' encode computes for this model).
It is compiled once, with dynamic batch and sequence length (torch.export Dims, up to
max_batch x max_length): sentences are sorted by length, batched with their neighbours, and
each batch runs at the length of its longest sentence — a 20-token sentence pays for about 20
tokens, not for a padded 128. Padding inside a batch is masked: the attention's boolean mask
gives padded keys -inf scores (softmax gives them exactly 0) and pooling multiplies them by 0,
so an embedding does not depend on what the padded positions hold.
lengths=(16, 128) pads every sentence to the smallest of those lengths instead (the fixed
lengths of vkq before dynamic shapes; kept for comparison).

The lowered program: every linear as linear_dynamic (each token's row quantized to int8 on the
device, int8 GEMM) or linear_weight_only, and the float parts (embedding gather, mask
arithmetic, layer_norm, gelu, attention (one scaled_dot_product_attention op a layer: BERT
loaded with attn_implementation="sdpa"), residual adds, pooling, normalisation) as shaders
(vkq/ops/); in a dynamic program the mask arithmetic that depends on the sequence length
itself too (arange and full: vkq/ops/creation.py; the padding mask gathered at arange indices:
index, vkq/ops/logic.py), so the dynamic program runs without torch.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import models
from .progress import bar
from .runtime import CompiledProgram

DEFAULT_LENGTHS = (16, 128)     # the fixed lengths a static encoder pads to
MAX_LENGTH, MAX_BATCH = 128, 32   # the dynamic encoder's bounds


class MeanPooledEncoder(nn.Module):
    """BertModel + masked mean pooling + L2 normalisation: (ids, mask) int64 (B, L) -> (B, H)."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(hidden.dtype)
        mean = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(mean, p=2, dim=1)


def tokenize(tokenizer, sentences, length: int):
    """(ids, mask) int64 numpy (N, length): padded to `length`, longer sentences truncated."""
    enc = tokenizer(list(sentences), padding="max_length", truncation=True, max_length=length,
                    return_tensors="np")
    return enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)


def token_counts(tokenizer, sentences) -> list:
    """Tokens per sentence, [CLS] and [SEP] included, untruncated."""
    return [len(ids) for ids in tokenizer(list(sentences))["input_ids"]]


def compile_encoder(bert, tokenizer, length: int | None = None, scheme: str = "dynamic", batch: int = 1,
                    device=None, verbose: bool = False, max_length: int = MAX_LENGTH,
                    max_batch: int = MAX_BATCH) -> CompiledProgram:
    """Export MeanPooledEncoder(bert), quantize its linears (scheme "dynamic" or "weight_only"),
    lower; the program runs on `device` when first called. length=None: one program for every
    batch up to max_batch and every length from 2 to max_length (dynamic shapes); else a
    program for (batch, length) inputs only."""
    import vkq
    from torch.export import Dim
    from .api import compile as _compile
    vkq._quiet_third_party_logs()
    if scheme not in ("dynamic", "weight_only"):
        raise ValueError(f"scheme must be 'dynamic' or 'weight_only', got {scheme!r}")
    ids, mask = tokenize(tokenizer, ["hello"] * max(2, batch), length or 16)
    example = (torch.from_numpy(ids), torch.from_numpy(mask))
    dims = None
    if length is None:
        b, n = Dim("batch", min=1, max=max_batch), Dim("sequence", min=2, max=max_length)
        dims = ({0: b, 1: n}, {0: b, 1: n})
    else:
        example = tuple(t[:batch] for t in example)
    program, fallback = _compile(MeanPooledEncoder(bert).eval(), example, None, scheme, dynamic_shapes=dims)
    if verbose:
        print(f"vkq: {len(fallback)} op(s) run on the CPU:")
        for op, reason in fallback:
            print(f"  {op}: {reason}")
    return CompiledProgram(program, device)


def torch_embed(bert, tokenizer, sentences, max_length: int = max(DEFAULT_LENGTHS)) -> np.ndarray:
    """The fp32 PyTorch embeddings (sentence-transformers' computation), (N, H) numpy."""
    return models.minilm_embed(bert, tokenizer, sentences, max_length=max_length).numpy()


class VulkanSentenceEncoder:
    """Sentence embeddings on a Vulkan device from one program compiled with dynamic batch and
    sequence length (on first use). Sentences are sorted by length and run `batch` at a time at
    the length of the longest (truncated to max_length); lengths=(16, 128) pads each to the
    smallest of those lengths instead. `bert`/`tokenizer` default to all-MiniLM-L6-v2."""

    def __init__(self, scheme: str = "dynamic", device=None, batch: int = 8, max_length: int = MAX_LENGTH,
                 lengths=None, bert=None, tokenizer=None, verbose: bool = False):
        if bert is None or tokenizer is None:
            tokenizer, bert = models.load_minilm()
        self.bert, self.tokenizer = bert.eval(), tokenizer
        self.scheme, self.batch, self.device, self.verbose = scheme, int(batch), device, verbose
        self.lengths = tuple(sorted(lengths)) if lengths else None
        self.max_length = max(self.lengths) if self.lengths else int(max_length)
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self._program = None

    @property
    def program(self) -> CompiledProgram:
        if self._program is None:
            self._program = compile_encoder(self.bert, self.tokenizer, None, self.scheme, device=self.device,
                                            verbose=self.verbose, max_length=self.max_length,
                                            max_batch=max(self.batch, 2))
        return self._program

    def length_for(self, n_tokens: int) -> int:
        """The sequence length a sentence of n_tokens runs at (alone)."""
        n = min(max(n_tokens, 2), self.max_length)
        return next(L for L in self.lengths if L >= n) if self.lengths else n

    def batches(self, sentences) -> list:
        """[(indices, length)]: the sentences sorted by token count, `batch` at a time, each batch
        at the length its longest sentence needs."""
        counts = token_counts(self.tokenizer, sentences)
        order = sorted(range(len(sentences)), key=lambda i: counts[i])
        out = []
        for start in range(0, len(order), self.batch):
            part = order[start:start + self.batch]
            out.append((part, self.length_for(max(counts[i] for i in part))))
        return out

    def embed(self, sentences, progress: bool = False) -> np.ndarray:
        """(N, H) float32 embeddings, in the order given."""
        sentences = list(sentences)
        out = np.zeros((len(sentences), self.bert.config.hidden_size), np.float32)
        work = self.batches(sentences)
        if progress:
            work = bar(work, "embedding", "batch")
        for part, length in work:
            ids, mask = tokenize(self.tokenizer, [sentences[i] for i in part], length)
            out[part] = self.program(ids, mask)
        return out

    def torch_embed(self, sentences) -> np.ndarray:
        return torch_embed(self.bert, self.tokenizer, sentences, self.max_length)


def cosine_matrix(emb) -> np.ndarray:
    """Pairwise cosine similarities of row embeddings."""
    e = np.asarray(emb, np.float64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    return e @ e.T
