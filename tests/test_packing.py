"""Int8x4 packing on the host: round trips and the layout formulas, index by index."""
import numpy as np
import pytest

from vkq import pack, unpack
from vkq.packing import ALL_LAYOUTS, convert, packed_size, same_image

ODD_SHAPES = [(1,), (3,), (17,), (2, 3), (5, 7), (1, 1, 1), (3, 5, 7), (1, 2, 3, 5), (2, 17, 3, 7), (3, 1, 5, 2),
              (1, 7, 1, 1), (2, 3, 17, 5)]


@pytest.mark.parametrize("layout", ALL_LAYOUTS)
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_roundtrip(shape, layout):
    q = np.random.default_rng(hash(shape) % 2**32).integers(-128, 128, shape).astype(np.int8)
    words = pack(q, layout)
    assert words.dtype == np.int32 and words.size == packed_size(shape, layout)
    np.testing.assert_array_equal(unpack(words, layout, shape), q)


def _byte(words, idx, byte):
    return np.int8(words.view(np.uint8)[4 * idx + byte])


def test_4w4c_formula():
    N, C, H, W = 2, 5, 3, 7
    q = np.random.default_rng(1).integers(-128, 128, (N, C, H, W)).astype(np.int8)
    words = pack(q, "4W4C")
    Wp, Cp = 8, 8
    for n, c, h, w in np.ndindex(N, C, H, W):
        idx = (((n * H + h) * Wp // 4 + w // 4) * Cp // 4 + c // 4) * 4 + w % 4
        assert _byte(words, idx, c % 4) == q[n, c, h, w]


def test_4h4w_formula():
    N, C, H, W = 2, 3, 5, 6
    q = np.random.default_rng(2).integers(-128, 128, (N, C, H, W)).astype(np.int8)
    words = pack(q, "4H4W")
    Hp, Wp = 8, 8
    for n, c, h, w in np.ndindex(N, C, H, W):
        idx = (((n * C + c) * Hp // 4 + h // 4) * Wp // 4 + w // 4) * 4 + h % 4
        assert _byte(words, idx, w % 4) == q[n, c, h, w]


def test_little_endian_word():
    # one 4x4 block: int32 0 of 4H4W holds row 0, columns 0..3 as q0 | q1<<8 | q2<<16 | q3<<24
    q = np.array([[1, -2, 3, -128]], dtype=np.int8)
    assert pack(q, "4H4W")[0] == (1 | (0xFE << 8) | (3 << 16) | (0x80 << 24)) - (1 << 32)


def test_padding_is_zero():
    q = np.full((1, 1, 1, 1), -1, np.int8)
    for layout in ALL_LAYOUTS:
        words = pack(q, layout)
        assert words[0] == 0xFF and not words[1:].any()


def test_convert_between_layouts():
    q = np.random.default_rng(3).integers(-128, 128, (2, 5, 3, 7)).astype(np.int8)
    np.testing.assert_array_equal(convert(pack(q, "4W4C"), "4W4C", "4H4W", q.shape), pack(q, "4H4W"))


def test_bad_input_is_refused():
    q = np.zeros((2, 3), np.int8)
    with pytest.raises(ValueError, match="unknown packed layout"):
        pack(q, "NCHW")
    with pytest.raises(TypeError, match="int8"):
        pack(q.astype(np.int16), "4H4W")
    with pytest.raises(ValueError, match="rank <= 4"):
        pack(np.zeros((1, 1, 1, 1, 1), np.int8), "4H4W")
    with pytest.raises(ValueError, match="needs 4 int32 words"):
        unpack(np.zeros(3, np.int32), "4H4W", (2, 3))


RESHAPES = [((1, 8, 1, 1), (1, 8)), ((2, 8, 1, 1), (2, 8)), ((1, 5, 1, 1), (1, 5)), ((1, 16), (16,)),
            ((4, 4), (1, 1, 4, 4)), ((3, 7), (21,)), ((1, 3, 7), (1, 1, 3, 7)), ((8, 1, 1), (1, 8, 1)),
            ((4, 2, 2), (2, 8, 1)), ((2, 3, 5, 7), (6, 35)), ((1, 1, 1, 5), (5,))]


@pytest.mark.parametrize("a,b", RESHAPES)
def test_same_image_is_what_pack_gives(a, b):
    """same_image(a, la, b, lb) exactly when packing a tensor in la and its reshape in lb gives
    the same words, for every pair of layouts (two random tensors witness a difference; the
    small chunk makes the comparison run over several pieces)."""
    rng = np.random.default_rng(len(a) * 10 + len(b))
    qs = [rng.integers(-128, 128, a).astype(np.int8) for _ in range(2)]
    for la in ALL_LAYOUTS:
        for lb in ALL_LAYOUTS:
            want = all(np.array_equal(pack(q, la), pack(q.reshape(b), lb)) if packed_size(a, la) == packed_size(b, lb)
                       else False for q in qs)
            assert same_image(a, la, b, lb, chunk=5) == want, (a, la, b, lb)
            assert same_image(b, lb, a, la) == want
    assert same_image((1, 1280, 1, 1), "4W4C", (1, 1280), "4H4W")      # a CNN's pooled features
    assert not same_image((1, 1280, 1, 1), "4W4C", (1, 1280), "ROW")
