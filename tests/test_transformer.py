"""all-MiniLM-L6-v2 sentence embeddings on Vulkan (vkq/transformer.py) against PyTorch fp32.

On 24 varied sentences (L = 16): every dynamic-int8 embedding (per-token int8 linears on the
device, float32 shaders for the rest) has cosine >= 0.99 with the fp32 one, weight-only too;
pairs of sentences whose fp32 similarities differ clearly (by more than 0.05) are ranked the
same way. The program is one Vulkan segment, embedding gather and mask arithmetic included;
padding does not change an embedding. The 128-token case is marked slow.
"""
import numpy as np
import pytest

pytest.importorskip("transformers")

from vkq import models                                                    # noqa: E402
from vkq.registry import cpu_reason                                        # noqa: E402
from vkq.runtime import CompiledProgram                                   # noqa: E402
from vkq.transformer import (VulkanSentenceEncoder, compile_encoder, cosine_matrix, token_counts,  # noqa: E402
                             tokenize, torch_embed)

L = 16
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A woman is holding an infant.",
    "A man is riding a horse.",
    "A man rides a white horse.",
    "A woman is playing violin.",
    "A musician plays the violin on stage.",
    "Two men pushed carts through the woods.",
    "A monkey is playing drums.",
    "Someone in a costume is playing drums.",
    "The stock market fell sharply today.",
    "Shares dropped as investors panicked.",
    "How do I reset my password?",
    "I forgot my login credentials.",
    "The cat sleeps on the warm windowsill.",
    "A kitten naps in the sunshine.",
    "Quantum computers use qubits.",
    "Paris is the capital of France.",
    "The Eiffel Tower is in Paris.",
    "It will rain tomorrow afternoon.",
    "The weather forecast predicts showers.",
    "She wrote a program in Python.",
    "Vulkan runs compute shaders on GPUs.",
]
LONG = [
    "The committee met for several hours on Tuesday afternoon to discuss the proposed budget, and after a long "
    "and sometimes heated debate they finally agreed to postpone the vote until the following week.",
    "After months of delays caused by bad weather, supply shortages and a strike at the port, the new bridge "
    "across the river finally opened to traffic this morning, cutting the commute for thousands of people.",
    "The budget vote was postponed by the committee after a lengthy discussion.",
    "A new bridge opened today after long delays.",
    "My grandmother bakes the best apple pie in the whole town.",
]
MARGIN = 0.05   # fp32 similarities that differ by more than this must keep their order


@pytest.fixture(scope="module")
def minilm():
    tokenizer, bert = models.load_minilm()
    return tokenizer, bert


@pytest.fixture(scope="module")
def fp32(minilm):
    tokenizer, bert = minilm
    return torch_embed(bert, tokenizer, SENTENCES)


@pytest.fixture(scope="module")
def programs(minilm):
    """The lowered Programs (L = 16, batch 1) per scheme; each test makes its own executor."""
    tokenizer, bert = minilm
    return {s: compile_encoder(bert, tokenizer, L, s).program for s in ("dynamic", "weight_only")}


def embed(program, device, tokenizer, sentences):
    prog = CompiledProgram(program, device)
    out = []
    for s in sentences:
        ids, mask = tokenize(tokenizer, [s], program.tensors[program.inputs[0]].shape[1])
        out.append(prog(ids, mask)[0])
    return np.stack(out), prog


def row_cosines(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def misordered_pairs(sim_ref, sim, margin=MARGIN):
    """Pairs of sentence pairs whose fp32 similarities differ by more than margin but come out in
    the other order."""
    iu = np.triu_indices(len(sim_ref), 1)
    r, s = sim_ref[iu], sim[iu]
    clear = (r[:, None] - r[None, :]) > margin
    return int(np.sum(clear & (s[:, None] <= s[None, :]))), int(clear.sum())


def test_sentences_fit_the_short_program(minilm):
    assert len(SENTENCES) >= 20 and max(token_counts(minilm[0], SENTENCES)) <= L


def test_lowered_program_runs_on_vulkan_only(programs):
    for scheme, program in programs.items():
        linear = "linear_dynamic" if scheme == "dynamic" else "linear_weight_only"
        linears = sum(n.attrs["parts"] if n.op == "linear_dynamic_parts" else n.op == linear for n in program.nodes)
        assert linears == 36   # 6 layers x (Q, K, V, out, 2 FFN); dynamic: Q, K, V one linear_dynamic_parts node
        assert [n.op for n in program.nodes].count("linear_dynamic_parts") == (6 if scheme == "dynamic" else 0)
        assert program.fallback == [], program.fallback            # embeddings and mask arithmetic too
        assert all(cpu_reason(n, program.tensors) is None for n in program.nodes)


@pytest.mark.parametrize("scheme", ["dynamic", "weight_only"])
def test_embeddings_match_fp32(minilm, fp32, programs, device, scheme):
    tokenizer, _ = minilm
    got, prog = embed(programs[scheme], device, tokenizer, SENTENCES)
    segments = prog.executor.segments
    assert [s[0] for s in segments] == ["vulkan"]            # one recorded sequence: ids in, embeddings out
    _, _, ups, downs, _ = segments[0]
    assert downs == prog.program.outputs and sorted(ups) == sorted(prog.program.inputs)
    cos = row_cosines(got, fp32)
    print(f"\n{device.info.name} {scheme}: cosine with fp32 min {cos.min():.5f} mean {cos.mean():.5f}")
    assert cos.min() >= 0.99
    bad, clear = misordered_pairs(cosine_matrix(fp32), cosine_matrix(got))
    print(f"  {clear} clearly ordered pairs of pairs, {bad} misordered")
    assert clear > 1000 and bad == 0


def test_padding_is_ignored(minilm, programs, device):
    """What padded positions hold (token ids under mask 0) does not change the embedding."""
    tokenizer, _ = minilm
    prog = CompiledProgram(programs["dynamic"], device)
    ids, mask = tokenize(tokenizer, [SENTENCES[0]], L)
    pad = mask[0] == 0
    assert pad.sum() >= 5
    junk = ids.copy()
    junk[0, pad] = np.random.default_rng(0).integers(1000, 20000, pad.sum())
    np.testing.assert_array_equal(prog(ids, mask), prog(junk, mask))


@pytest.mark.parametrize("scheme,at_least", [("weight_only", 0.99999), ("dynamic", 0.999)])
def test_vulkan_agrees_with_the_program_reference(minilm, programs, device, scheme, at_least):
    """The same program on the numpy references. weight_only: the float shaders differ from the
    references by rounding only. dynamic: that rounding can move a value across an int8 step of
    its row's quantization, which then differs by a whole step (seen: cosine 0.99926)."""
    tokenizer, _ = minilm
    prog = CompiledProgram(programs[scheme], device)
    ids, mask = tokenize(tokenizer, SENTENCES[2:4], L)
    got = np.concatenate([prog(ids[i:i + 1], mask[i:i + 1]) for i in range(2)])
    assert row_cosines(got, np.concatenate([prog.run_reference(ids[i:i + 1], mask[i:i + 1]) for i in range(2)])).min() >= at_least


def test_saved_program_runs_the_same(minilm, programs, device, tmp_path):
    """The .vkq file keeps the attention op and its attrs (strided views of q, k, v, the mask)."""
    import vkq
    tokenizer, _ = minilm
    prog = CompiledProgram(programs["dynamic"], device)
    loaded = vkq.load(prog.save(tmp_path / "minilm.vkq"), device=device)
    ids, mask = tokenize(tokenizer, SENTENCES[5:6], L)
    attn = [n for n in loaded.program.nodes if n.op == "scaled_dot_product_attention"]
    assert len(attn) == 6 and attn[0].attrs == next(n for n in prog.program.nodes if n.name == attn[0].name).attrs
    assert attn[0].attrs["mask_kind"] == "bool" and attn[0].attrs.get("views"), attn[0].attrs
    np.testing.assert_array_equal(loaded(ids, mask), prog(ids, mask))


@pytest.mark.slow
def test_long_sentences_at_128_tokens(minilm, device):
    """Sentences of up to ~45 tokens in the 128-token program; a short one shares it, padded.
    (SwiftShader takes ~10 s a sentence here, nearly all in linear_dynamic.)"""
    tokenizer, bert = minilm
    enc = VulkanSentenceEncoder("dynamic", lengths=(128,), device=device, bert=bert, tokenizer=tokenizer)
    sentences = LONG + SENTENCES[:1]
    assert max(token_counts(tokenizer, sentences)) > 32
    got, ref = enc.embed(sentences), enc.torch_embed(sentences)
    cos = row_cosines(got, ref)
    print(f"\n{device.info.name} dynamic L=128: cosine with fp32 min {cos.min():.5f} mean {cos.mean():.5f}")
    assert cos.min() >= 0.99
    bad, _ = misordered_pairs(cosine_matrix(ref), cosine_matrix(got))
    assert bad == 0


@pytest.fixture(scope="module")
def dynamic_encoder(minilm):
    """One MiniLM program for every batch up to 8 and length up to 64 (dynamic shapes)."""
    tokenizer, bert = minilm
    return compile_encoder(bert, tokenizer, None, "dynamic", max_length=64, max_batch=8).program


def test_dynamic_encoder_runs_each_batch_at_its_own_length(minilm, fp32, dynamic_encoder, device):
    """Sentences sorted and batched by length, each batch at its longest sentence's length, give
    the embeddings of the same program run one sentence at a time padded to 16 (float rounding:
    a row's reductions run over other lengths), and match fp32."""
    tokenizer, bert = minilm
    enc = VulkanSentenceEncoder("dynamic", device=device, batch=5, max_length=64, bert=bert, tokenizer=tokenizer)
    enc._program = CompiledProgram(dynamic_encoder, device)
    lengths = sorted({L for _, L in enc.batches(SENTENCES)})
    assert len(lengths) >= 3 and max(lengths) < L        # several lengths, all shorter than the padded 16
    got = enc.embed(SENTENCES)
    padded = VulkanSentenceEncoder("dynamic", device=device, batch=1, lengths=(L,), bert=bert, tokenizer=tokenizer)
    padded._program = enc._program
    assert row_cosines(got, padded.embed(SENTENCES)).min() >= 0.9999
    cos = row_cosines(got, fp32)
    assert cos.min() >= 0.99
    assert misordered_pairs(cosine_matrix(fp32), cosine_matrix(got))[0] == 0
    assert prog_shapes(enc._program) >= len(lengths)


def prog_shapes(prog) -> int:
    return len(prog.executor._builds)


def test_embed_reads_sentences_from_a_file(minilm, dynamic_encoder, tmp_path, monkeypatch):
    """`vkq embed --file` embeds one sentence a line (blank lines skipped) into --output."""
    from vkq import cli, transformer
    tokenizer, bert = minilm
    monkeypatch.setattr(transformer.models, "load_minilm", lambda: (tokenizer, bert))
    monkeypatch.setattr(transformer, "compile_encoder", lambda *a, **k: CompiledProgram(dynamic_encoder, k.get("device")))
    (tmp_path / "s.txt").write_text("\n".join(SENTENCES[:7]) + "\n\n" + SENTENCES[7] + "\n")
    assert cli.main(["embed", "--file", str(tmp_path / "s.txt"), "--output", str(tmp_path / "e.npy"),
                     "--batch", "3", "--max-length", "64"]) == 0
    emb = np.load(tmp_path / "e.npy")
    assert emb.shape == (8, 384) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-4)
    assert cli.main(["embed"]) == 2
