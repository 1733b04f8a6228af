"""embedding_q8rows (vkq/ops/embedding_q8.py): int8 table rows times their float32 scale, Vulkan
against the reference bit for bit; quantize_rows (vkq/quantizer.py) against the dynamic scheme's
own weight quantization; lower(..., int8_embeddings=True) on a tied decoder."""
import numpy as np
import pytest
import torch

from oputil import single_op_program, spec
from vkq.executor import VulkanExecutor, run_reference
from vkq.ops.embedding_q8 import embedding_q8rows, pack_rows
from vkq.packing import unpack
from vkq.quantizer import quantize_rows
from vkq.registry import cpu_reason

R = np.random.default_rng(57)


def table_and_scale(v, h):
    q = R.integers(-128, 128, (v, h)).astype(np.int8)
    q[1] = 0                                             # a row of zeros
    scale = R.uniform(1e-4, 0.05, v).astype(np.float32)
    scale[::5] *= -1.0                                   # (nothing in the op assumes a sign)
    return q, scale


def some_ids(v, shape):
    ids = R.integers(0, v, shape).astype(np.int32)
    flat = ids.reshape(-1)
    flat[0], flat[-1] = (0, v - 1) if flat.size > 1 else (v - 1, v - 1)
    if flat.size > 3:
        flat[2] = flat[1]                                # a repeated id
    return ids


def program(ids, q, scale):
    v, h = q.shape
    return single_op_program("embedding_q8rows", [("ids", spec(ids.shape, "int32"))],
                             [("y", spec(ids.shape + (h,)))], {},
                             {"table": (spec((v, h), "int8", "4H4W"), q), "scale": (spec((v,)), scale)})


@pytest.mark.parametrize("v", [37, 1000])
@pytest.mark.parametrize("h", [576, 23, 5])
@pytest.mark.parametrize("shape", [(1, 7), (3, 11), (1,)])
def test_embedding_q8rows_equals_reference(device, v, h, shape):
    q, scale = table_and_scale(v, h)
    ids = some_ids(v, shape)
    prog = program(ids, q, scale)
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    ref = run_reference(prog, ids)
    # the formula: each row's values times its scale, one float32 multiply
    want = (q.astype(np.float32) * scale[:, None])[ids]
    assert ref.shape == shape + (h,) and ref.dtype == np.float32
    np.testing.assert_array_equal(ref, want)
    np.testing.assert_array_equal(VulkanExecutor(prog, device)(ids), ref)


@pytest.mark.parametrize("h", [576, 23])
def test_embedding_q8rows_texel_and_storage_loads(loads_device, h):
    q, scale = table_and_scale(101, h)
    ids = some_ids(101, (3, 11))
    prog = program(ids, q, scale)
    np.testing.assert_array_equal(VulkanExecutor(prog, loads_device)(ids), run_reference(prog, ids))


def test_out_of_range_ids_raise_in_the_reference_and_clamp_on_the_device(device):
    q, scale = table_and_scale(37, 23)
    for bad in (37, -1, 1000):
        ids = np.array([[3, bad, 5]], np.int32)
        with pytest.raises(ValueError, match=f"id {bad} is outside the table's rows \\[0, 37\\)"):
            embedding_q8rows(ids, q, scale)
        got = VulkanExecutor(program(ids, q, scale), device)(ids)
        np.testing.assert_array_equal(got, embedding_q8rows(np.clip(ids, 0, 36), q, scale))


def test_bad_operands_are_named():
    q, scale = table_and_scale(37, 5)
    with pytest.raises(ValueError, match="int8 table"):
        embedding_q8rows(np.zeros(2, np.int32), q.astype(np.float32), scale)
    with pytest.raises(ValueError, match="scales"):
        embedding_q8rows(np.zeros(2, np.int32), q, scale[:-1])
    prog = single_op_program("embedding_q8rows", [("ids", spec((2,), "float32"))], [("y", spec((2, 5)))], {},
                             {"table": (spec((37, 5), "int8", "4H4W"), q), "scale": (spec((37,)), scale)})
    assert "int32 ids" in cpu_reason(prog.nodes[0], prog.tensors)


@pytest.mark.parametrize("h", [5, 8, 23])
def test_pack_rows_puts_value_j_at_byte_j_mod_4_of_word_j_div_4(h):
    q, _ = table_and_scale(7, h)
    words = pack_rows(q)
    w = -(-h // 4)
    assert words.dtype == np.int32 and words.size >= 7 * w and words.size % 4 == 0
    rows = words[:7 * w].reshape(7, w)
    for r in range(7):
        for j in range(h):
            assert (int(rows[r, j // 4]) >> (8 * (j % 4))) & 0xFF == int(q[r, j]) & 0xFF
        for j in range(h, 4 * w):
            assert (int(rows[r, j // 4]) >> (8 * (j % 4))) & 0xFF == 0
    assert not words[7 * w:].any()
    np.testing.assert_array_equal(unpack(words, "ROW", (7, 4 * w))[:, :h], q)


# ------------------------------------------------------------------ the rows' quantization

class Tied(torch.nn.Module):
    """A tiny decoder: token embedding -> linear (+ relu) -> lm_head sharing the embedding's weight."""

    def __init__(self, vocab=101, hidden=24):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.mid = torch.nn.Linear(hidden, hidden)
        self.lm_head = torch.nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.embed.weight
        with torch.no_grad():
            self.embed.weight[7] = 0.0                   # a row of zeros: the least scale
            self.embed.weight[11, 3] = 9.0               # an outlier: its row's scale
            self.embed.weight[13] *= 1e-3                # a row of small values

    def forward(self, ids):
        return self.lm_head(torch.relu(self.mid(self.embed(ids))))


@pytest.fixture(scope="module")
def tied():
    torch.manual_seed(0)
    return Tied().eval()


IDS = torch.tensor([[0, 5, 7, 7, 11, 13, 100, 42, 64]])


def _compile(model, **kw):
    from vkq.api import compile
    return compile(model, (IDS,), scheme=kw.pop("scheme", "dynamic"), progress=False, **kw)[0]


def _node(prog, op):
    found = [n for n in prog.nodes if n.op == op]
    assert found, f"no {op} in {[n.op for n in prog.nodes]}"
    return found


def test_quantize_rows_is_the_dynamic_schemes_linear_weight(tied):
    """The lm_head's linear_dynamic weight (convert_pt2e's int8 constant) and scales, lowered
    without int8 embeddings, are quantize_rows of the tied table."""
    prog = _compile(tied)
    head = _node(prog, "linear_dynamic")[-1]
    weight, w_scale = (prog.constants[t] for t in head.inputs[1:3])
    q, scale = quantize_rows(tied.embed.weight.detach().numpy())
    assert q.dtype == np.int8 and scale.dtype == np.float32 and q.shape == (101, 24) and scale.shape == (101,)
    np.testing.assert_array_equal(q, weight)
    np.testing.assert_array_equal(scale, w_scale)
    assert scale[7] == np.float32(2 ** -23) and not q[7].any()
    assert q[11, 3] == 127 and np.abs(q).max() <= 127


def test_quantize_rows_refuses_other_ranks():
    with pytest.raises(ValueError, match="2-D"):
        quantize_rows(np.zeros((3, 4, 5), np.float32))


def test_tied_weights_are_one_constant(tied):
    prog = _compile(tied, int8_embeddings=True)
    emb, = _node(prog, "embedding_q8rows")
    head = _node(prog, "linear_dynamic")[-1]
    table, scale = emb.inputs[1:3]
    q, s = quantize_rows(tied.embed.weight.detach().numpy())
    np.testing.assert_array_equal(prog.constants[table], q)
    np.testing.assert_array_equal(prog.constants[scale], s)
    np.testing.assert_array_equal(prog.constants[head.inputs[1]], prog.constants[table])
    np.testing.assert_array_equal(prog.constants[head.inputs[2]], prog.constants[scale])
    assert head.inputs[1:3] == [table, scale]          # stored once


def test_tied_program_saves_once_and_loads(tied, tmp_path):
    from vkq.progfile import load_program, save_program
    prog = _compile(tied, int8_embeddings=True)
    path = save_program(prog, tmp_path / "tied.vkq")
    loaded = load_program(path)
    assert sorted(loaded.constants) == sorted(prog.constants)
    ids = IDS.numpy().astype(np.int32)
    np.testing.assert_array_equal(run_reference(loaded, ids), run_reference(prog, ids))


def _float_tables(prog):
    return [k for k, a in prog.constants.items() if a.dtype == np.float32 and a.shape == (101, 24)]


def test_tied_decoder_runs_on_vulkan_with_int8_embeddings(tied, device):
    prog = _compile(tied, int8_embeddings=True)
    assert not _float_tables(prog) and not prog.fallback
    ids = IDS.numpy().astype(np.int32)
    ref = run_reference(prog, ids)
    np.testing.assert_array_equal(VulkanExecutor(prog, device)(ids), ref)
    with torch.no_grad():
        fp = tied(IDS).numpy()
    cos = float((ref * fp).sum() / np.linalg.norm(ref) / np.linalg.norm(fp))
    assert cos > 0.999 and np.abs(ref - fp).max() < 0.05 * np.abs(fp).max(), (cos, np.abs(ref - fp).max())


@pytest.mark.parametrize("scheme", ["static", "weight_only"])
def test_int8_embeddings_under_every_scheme(tied, scheme):
    prog = _compile(tied, scheme=scheme, int8_embeddings=True)
    _node(prog, "embedding_q8rows")
    assert not _float_tables(prog)


def test_without_the_option_the_float_table_stays(tied):
    prog = _compile(tied)
    emb, = _node(prog, "embedding")
    assert prog.constants[emb.inputs[0]].dtype == np.float32 and _float_tables(prog) == [emb.inputs[0]]
    assert not [n for n in prog.nodes if n.op == "embedding_q8rows"]


def test_dynamic_sequence_length(tied, device):
    """One program for every sequence length within the bounds (a prompt, then one token a step)."""
    seq = torch.export.Dim("seq", min=1, max=64)
    prog = _compile(tied, int8_embeddings=True, dynamic_shapes=({1: seq},))
    assert prog.dynamic
    _node(prog, "embedding_q8rows")
    ex = VulkanExecutor(prog, device)
    for n in (1, 5, 33):
        ids = R.integers(0, 101, (1, n)).astype(np.int32)
        got = ex(ids)
        assert got.shape == (1, n, 101)
        np.testing.assert_array_equal(got, run_reference(prog, ids))
