"""Sentence embeddings from a BERT encoder on Vulkan (all-MiniLM-L6-v2 by default).

    enc = VulkanSentenceEncoder(scheme="dynamic", lengths=(16, 128), device="llvmpipe")
    emb = enc.embed(["A man is eating food.", ...])    # (N, 384) float32, unit length
    ref = enc.torch_embed([...])                       # the fp32 PyTorch embeddings

The exported model is MeanPooledEncoder: BertModel -> mean of the last hidden states over the
attention mask -> L2 normalisation (what sentence-transformers' encode computes for this model).
Shapes are static per compiled program: a program takes (batch, L) token ids and mask, and each
sentence is padded to the smallest compiled L that holds it (longer ones are truncated to the
largest). Padding is masked: the attention mask adds float32's lowest value to the scores of
padded keys (softmax gives them exactly 0) and pooling multiplies them by 0, so an embedding
does not depend on what the padded positions hold.

The lowered program: a CPU prefix (the embedding gather by token id, the mask arithmetic on
int64/bool tensors), then one Vulkan segment: every linear as linear_dynamic (each token's row
quantized to int8 on the device, int8 GEMM) or linear_weight_only, and the float parts
(layer_norm, softmax, gelu, attention matmuls, residual adds, pooling, normalisation) as float32
shaders (vkq/ops/float.py).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import models
from .runtime import CompiledProgram

DEFAULT_LENGTHS = (16, 128)


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


def compile_encoder(bert, tokenizer, length: int, scheme: str = "dynamic", batch: int = 1,
                    device=None, verbose: bool = False) -> CompiledProgram:
    """Export MeanPooledEncoder(bert) for (batch, length) inputs, quantize its linears (scheme
    "dynamic" or "weight_only"), lower; the program runs on `device` when first called."""
    import vkq
    from .api import compile as _compile
    vkq._quiet_third_party_logs()
    if scheme not in ("dynamic", "weight_only"):
        raise ValueError(f"scheme must be 'dynamic' or 'weight_only', got {scheme!r}")
    ids, mask = tokenize(tokenizer, ["hello"] * batch, length)
    example = (torch.from_numpy(ids), torch.from_numpy(mask))
    program, fallback = _compile(MeanPooledEncoder(bert).eval(), example, None, scheme)
    if verbose:
        print(f"vkq: {len(fallback)} op(s) run on the CPU:")
        for op, reason in fallback:
            print(f"  {op}: {reason}")
    return CompiledProgram(program, device)


def torch_embed(bert, tokenizer, sentences, max_length: int = max(DEFAULT_LENGTHS)) -> np.ndarray:
    """The fp32 PyTorch embeddings (sentence-transformers' computation), (N, H) numpy."""
    return models.minilm_embed(bert, tokenizer, sentences, max_length=max_length).numpy()


class VulkanSentenceEncoder:
    """Sentence embeddings on a Vulkan device, one compiled program per padded length
    (compiled on first use). `bert`/`tokenizer` default to all-MiniLM-L6-v2."""

    def __init__(self, scheme: str = "dynamic", lengths=DEFAULT_LENGTHS, device=None, batch: int = 1,
                 bert=None, tokenizer=None, verbose: bool = False):
        if bert is None or tokenizer is None:
            tokenizer, bert = models.load_minilm()
        self.bert, self.tokenizer = bert.eval(), tokenizer
        self.scheme, self.lengths, self.batch = scheme, tuple(sorted(lengths)), batch
        self.device, self.verbose = device, verbose
        self.programs: dict[int, CompiledProgram] = {}

    def program(self, length: int) -> CompiledProgram:
        if length not in self.programs:
            self.programs[length] = compile_encoder(self.bert, self.tokenizer, length, self.scheme, self.batch,
                                                    self.device, self.verbose)
        return self.programs[length]

    def length_for(self, n_tokens: int) -> int:
        return next((L for L in self.lengths if L >= n_tokens), self.lengths[-1])

    def embed(self, sentences) -> np.ndarray:
        """(N, H) float32 embeddings, each sentence padded to the smallest length that holds it."""
        sentences = list(sentences)
        counts = token_counts(self.tokenizer, sentences)
        out = [None] * len(sentences)
        for length in self.lengths:
            idx = [i for i, c in enumerate(counts) if self.length_for(c) == length]
            for start in range(0, len(idx), self.batch):
                part = idx[start:start + self.batch]
                ids, mask = tokenize(self.tokenizer, [sentences[i] for i in part], length)
                if len(part) < self.batch:   # fill the static batch with empty rows (mask 0)
                    fill = self.batch - len(part)
                    ids = np.concatenate([ids, np.zeros((fill, length), np.int64)])
                    mask = np.concatenate([mask, np.zeros((fill, length), np.int64)])
                emb = self.program(length)(ids, mask)
                for row, i in enumerate(part):
                    out[i] = emb[row]
        return np.stack(out) if out else np.zeros((0, self.bert.config.hidden_size), np.float32)

    def torch_embed(self, sentences) -> np.ndarray:
        return torch_embed(self.bert, self.tokenizer, sentences, self.lengths[-1])


def cosine_matrix(emb) -> np.ndarray:
    """Pairwise cosine similarities of row embeddings."""
    e = np.asarray(emb, np.float64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    return e @ e.T
