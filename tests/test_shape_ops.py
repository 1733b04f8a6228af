"""The ops that move values (vkq/ops/shape.py) on every dtype, Vulkan against the numpy
reference bit for bit, on odd shapes and ranks up to 6; int8 from every packed layout into
every other (the raw output words too: padding bytes must be 0). And where a node runs:
one op name for every dtype, the registry deciding per node."""
import numpy as np
import pytest

from oputil import random_int8, single_op_program, spec
from vkq import packing
from vkq.executor import VulkanExecutor, run_reference
from vkq.program import Node
from vkq.registry import cpu_reason, get_op

R = np.random.default_rng(11)


def values(shape, dtype):
    if dtype == "int8":
        return random_int8(R, shape)
    if dtype == "int32":
        return R.integers(-2 ** 31, 2 ** 31 - 1, shape, dtype=np.int64).astype(np.int32)
    return R.standard_normal(shape).astype(np.float32)


def layout_for(shape, want):
    return "ROW" if len(shape) > 4 else want


def run(device, op, arrays, attrs, dtype, layouts=("4W4C", "4W4C")):
    """Run one node on the device and on its reference; compare every output exactly."""
    ref = get_op(op).reference(*arrays, **attrs)
    outs = ref if isinstance(ref, tuple) else (ref,)
    lay_in, lay_out = layouts
    ins = [(f"x{i}", spec(a.shape, dtype, layout_for(a.shape, lay_in) if dtype == "int8" else None, 0.1, 3))
           for i, a in enumerate(arrays)]
    outs_spec = [(f"y{i}", spec(o.shape, dtype, layout_for(o.shape, lay_out) if dtype == "int8" else None, 0.1, 3))
                 for i, o in enumerate(outs)]
    prog = single_op_program(op, ins, outs_spec, attrs)
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    ex = VulkanExecutor(prog, device)
    got = ex(*arrays)
    want = run_reference(prog, *arrays)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
        if dtype == "int8":
            s = prog.tensors[f"y{i}"]
            np.testing.assert_array_equal(ex.buffers[f"y{i}"].read(), packing.pack(w, s.layout))
    return want


CASES = [   # op, input shapes, attrs
    ("reshape", [(2, 3, 5, 7)], {"shape": [6, 35]}),
    ("reshape", [(2, 18, 5, 3)], {"shape": [2, 2, 9, 5, 3]}),          # channel shuffle's view: rank 5
    ("permute", [(2, 3, 5, 7)], {"dims": [0, 2, 3, 1]}),                # ConvNeXt: NCHW -> NHWC
    ("permute", [(1, 3, 2, 5, 2, 7)], {"dims": [0, 1, 3, 2, 4, 5]}),    # Swin's window partition
    ("permute", [(3, 2, 5, 4, 1)], {"dims": [4, 2, 0, 3, 1]}),
    ("transpose", [(2, 2, 9, 5, 3)], {"dim0": 1, "dim1": 2}),           # channel shuffle
    ("transpose", [(1, 17, 12, 13)], {"dim0": -1, "dim1": -2}),
    ("expand", [(3, 1, 7)], {"shape": [2, 3, 5, 7]}),
    ("cat", [(3, 2, 7), (3, 5, 7), (3, 1, 7)], {"dim": 1}),
    ("cat", [(1, 5, 3, 3), (1, 2, 3, 3)], {"dim": 1}),                  # channels: bytes of one word from two inputs
    ("cat", [(2, 1, 3, 2, 5), (2, 1, 3, 2, 5)], {"dim": 4}),
    ("slice", [(2, 7, 9, 6)], {"dim": 2, "start": 1, "end": None, "step": 2}),   # PatchMerging's x[..., 1::2, :]
    ("slice", [(3, 13, 5)], {"dim": -1, "start": -4, "end": -1, "step": 1}),
    ("select", [(3, 2, 4, 7, 5)], {"dim": 0, "index": 2}),              # q, k, v of a packed projection
    ("select", [(2, 7, 9)], {"dim": 1, "index": -1}),                   # ViT's class token
    ("split", [(1, 13, 5, 3)], {"dim": 1, "sizes": [6, 7]}),            # ShuffleNet's chunk
    ("split", [(2, 11, 96)], {"dim": 2, "sizes": [32, 32, 32]}),        # GPT-2's qkv
    ("unbind", [(3, 2, 4, 7, 5)], {"dim": 0}),
    ("constant_pad_nd", [(1, 3, 5, 6)], {"pad": [1, 2, 0, 3], "value": -7}),
    ("constant_pad_nd", [(2, 7, 3)], {"pad": [0, 0, 1, 1, 2, 0], "value": 5}),
]
IDS = [f"{c[0]}{i}" for i, c in enumerate(CASES)]


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
@pytest.mark.parametrize("op,shapes,attrs", CASES, ids=IDS)
def test_shape_op(loads_device, op, shapes, attrs, dtype):
    run(loads_device, op, [values(s, dtype) for s in shapes], attrs, dtype)


@pytest.mark.parametrize("src,dst", [("4W4C", "4H4W"), ("4H4W", "4W4C"), ("4H4W", "ROW"), ("ROW", "4W4C"),
                                     ("ROW", "ROW")])
@pytest.mark.parametrize("op,shapes,attrs", [CASES[2], CASES[9], CASES[11], CASES[18], CASES[15]],
                         ids=["permute", "cat", "slice", "pad", "split"])
def test_int8_between_layouts(loads_device, op, shapes, attrs, src, dst):
    run(loads_device, op, [values(s, "int8") for s in shapes], attrs, "int8", (src, dst))


@pytest.mark.parametrize("op,shape,attrs,layouts,variant", [
    ("permute", (2, 3, 5, 7), {"dims": [0, 2, 3, 1]}, ("4W4C", "4W4C"), "MAP"),        # bytes from many words
    ("select", (3, 2, 4, 7, 8), {"dim": 0, "index": 1}, ("ROW", "4H4W"), "WORDS"),      # q of a packed qkv
    ("permute", (1, 3, 2, 5, 2, 16), {"dims": [0, 1, 3, 2, 4, 5]}, ("ROW", "ROW"), "BLOCKS"),   # window partition
    ("constant_pad_nd", (1, 2, 5, 8), {"pad": [0, 0, 1, 0], "value": -7}, ("4H4W", "4H4W"), "WORDS"),   # fill words
    ("constant_pad_nd", (1, 8, 3, 8), {"pad": [0, 0, 1, 2], "value": 5}, ("4W4C", "4W4C"), "BLOCKS"),   # fill blocks
])
def test_int8_gathers_by_map_words_and_blocks(loads_device, op, shape, attrs, layouts, variant):
    """The three map variants of shaders/repack.comp, each a destination ivec4 an invocation,
    from storage buffers or texels (TEXEL, the destination by 64-bit stores there)."""
    x = values(shape, "int8")
    ref = get_op(op).reference(x, **attrs)
    prog = single_op_program(op, [("x", spec(x.shape, "int8", layouts[0], 0.1, 3))],
                             [("y", spec(ref.shape, "int8", layouts[1], 0.1, 3))], attrs)
    ex = VulkanExecutor(prog, loads_device)
    got = ex(x)
    (step,) = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    assert variant in step.defines and ("TEXEL" in step.defines) == loads_device.texel_loads, step.defines
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(ex.buffers["y"].read(), packing.pack(ref, layouts[1]))    # padding 0


@pytest.mark.parametrize("op,shape,attrs,variant", [
    ("permute", (1, 3, 2, 5, 2, 7), {"dims": [0, 1, 3, 2, 4, 5]}, "GATHER"),   # Swin's window partition
    ("permute", (2, 3, 5, 7), {"dims": [0, 2, 3, 1]}, "GATHER"),               # 210 words: a partial block
    ("transpose", (3, 2, 1), {"dim0": 0, "dim1": 2}, "GATHER"),                # rows of 1: every step unravels
    ("cat", (3, 5, 7), {"dim": 1}, "GENERAL"),                                 # into a slice of dst
])
def test_float_gathers_by_blocks(loads_device, op, shape, attrs, variant):
    """float32 gathers whose destination is the iteration itself (GATHER), and take by an index
    map (INDEX): blocks of 4 words, src (and the map) as texels where the device takes texel
    loads and src is whole texels; a copy into part of the destination stays GENERAL."""
    x = values(shape, "float32")
    arrays = [x, values(shape, "float32")] if op == "cat" else [x]
    ref = get_op(op).reference(*arrays, **attrs)
    prog = single_op_program(op, [(f"x{i}", spec(a.shape)) for i, a in enumerate(arrays)], [("y", spec(ref.shape))],
                             attrs)
    ex = VulkanExecutor(prog, loads_device)
    got = ex(*arrays)
    steps = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    assert all(variant in st.defines for st in steps), [st.defines for st in steps]
    texel = variant == "GATHER" and loads_device.texel_loads and x.size % 4 == 0
    assert all(("TEXEL" in st.defines) == texel for st in steps), [st.defines for st in steps]
    np.testing.assert_array_equal(got, ref)
    index = np.roll(np.arange(x.size).reshape(x.shape), 1, -1).astype(np.int32)       # torch.roll
    prog = single_op_program("take", [("x", spec(x.shape))], [("y", spec(x.shape))], {},
                             {"i": (spec(index.shape, "int32"), index)})
    ex = VulkanExecutor(prog, loads_device)
    np.testing.assert_array_equal(ex(x), np.roll(x, 1, -1))
    (st,) = [st for seg in ex.segments if seg[0] == "vulkan" for st in seg[1].steps]
    assert "INDEX" in st.defines and ("TEXEL" in st.defines) == (loads_device.texel_loads and x.size % 4 == 0)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_take_by_an_index_map(device, dtype):
    """torch.roll (Swin's shifted windows) as a gather by a constant index map."""
    x = values((1, 5, 7, 3), dtype)
    index = np.roll(np.arange(x.size).reshape(x.shape), (-2, -3), (1, 2)).astype(np.int32)
    prog = single_op_program("take", [("x", spec(x.shape, dtype, "4H4W" if dtype == "int8" else None, 0.1, 0))],
                             [("y", spec(x.shape, dtype, "4W4C" if dtype == "int8" else None, 0.1, 0))], {},
                             {"i": (spec(index.shape, "int32"), index)})
    got = VulkanExecutor(prog, device)(x)
    np.testing.assert_array_equal(got, np.roll(x, (-2, -3), (1, 2)))
    np.testing.assert_array_equal(run_reference(prog, x), got)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int8"])
@pytest.mark.parametrize("shape,dims", [
    ((1, 3, 9, 7), [["keep"], ["keep"], ["reflect", 2, 1], ["reflect", 1, 3]]),
    ((2, 5, 6, 3), [["keep"], ["replicate", 0, 2], ["circular", 3, 1], ["flip"]]),
    ((3, 11, 5), [["flip"], ["roll", -4], ["roll", 7]]),
    ((2, 7, 5, 3), [["tile", 3], ["pick", 6, 0, 0, 3], ["keep"], ["pick", 2]]),
])
def test_remap_makes_its_map_per_shape(device, dtype, shape, dims):
    """remap (flip, roll, reflect / replicate / circular padding, picks and tiles with a dynamic
    dim): equal to numpy's flip, roll, pad modes, take and tile (torch's reflect / replicate /
    circular are numpy's reflect / edge / wrap), for every dtype (int8 between layouts), its map
    made from the shape."""
    x = values(shape, dtype)
    want = x
    modes = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
    for d, (kind, *ab) in enumerate(dims):
        if kind == "flip":
            want = np.flip(want, d)
        elif kind == "roll":
            want = np.roll(want, ab[0], d)
        elif kind == "pick":
            want = np.take(want, ab, d)
        elif kind == "tile":
            want = np.tile(want, [ab[0] if j == d else 1 for j in range(len(shape))])
        elif kind != "keep":
            want = np.pad(want, [(0, 0)] * d + [tuple(ab)] + [(0, 0)] * (len(shape) - d - 1), mode=modes[kind])
    prog = single_op_program("remap", [("x", spec(shape, dtype, "4H4W" if dtype == "int8" else None, 0.1, 0))],
                             [("y", spec(want.shape, dtype, "4W4C" if dtype == "int8" else None, 0.1, 0))],
                             {"dims": dims})
    got = VulkanExecutor(prog, device)(x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run_reference(prog, x), got)


def test_int8_gathers_in_a_row_are_one(loads_device):
    """fold_view_chains: Swin's window partition (4W4C -> a ROW view -> permute -> 4H4W windows)
    and a select and a slice after it, each read by the next alone, become one view_chain node
    (one repack dispatch by the composed byte map; the raw words, padding 0, compared); a tensor
    read twice (t2) or a program output ends a chain; float views are left alone. The reference
    of the folded program is the same bits."""
    from vkq.program import Program
    from vkq.rewrites import rewrite_for_shapes
    x = values((1, 6, 6, 10), "int8")          # (B, H, W, C), windows of 3 x 3
    sp = lambda shape, layout: spec(shape, "int8", layout, 0.1, 3)
    t = {"x": sp((1, 6, 6, 10), "4W4C"), "t0": sp((1, 2, 3, 2, 3, 10), "ROW"), "t1": sp((1, 2, 2, 3, 3, 10), "ROW"),
         "t2": sp((4, 9, 10), "4H4W"), "t3": sp((9, 10), "4H4W"), "y": sp((9, 6), "4W4C"),
         "z": sp((2, 9, 10), "4H4W"), "f": spec((1, 6, 6, 10)), "g": spec((6, 60))}
    nodes = [Node("repack", ["x"], ["t0"], {"shape": [1, 2, 3, 2, 3, 10]}, name="view"),
             Node("permute", ["t0"], ["t1"], {"dims": [0, 1, 3, 2, 4, 5]}, name="perm"),
             Node("repack", ["t1"], ["t2"], {"shape": [4, 9, 10]}, name="windows"),
             Node("select", ["t2"], ["t3"], {"dim": 0, "index": 2}, name="sel"),
             Node("slice", ["t3"], ["y"], {"dim": 1, "start": 2, "end": 8}, name="sl"),
             Node("slice", ["t2"], ["z"], {"dim": 0, "start": 1, "end": 3}, name="other"),
             Node("reshape", ["f"], ["g"], {"shape": [6, 60]}, name="float_view")]
    prog = Program(t, nodes, ["x", "f"], ["y", "z", "t2", "g"])
    f = values((1, 6, 6, 10), "float32")
    want = run_reference(prog, x, f)
    rewrite_for_shapes(prog)
    assert [(n.name, n.op) for n in prog.nodes] == [("windows", "view_chain"), ("sl", "view_chain"),
                                                    ("other", "slice"), ("float_view", "reshape")]
    assert [s[0] for s in prog.nodes[0].attrs["steps"]] == ["repack", "permute", "repack"]
    assert prog.nodes[1].inputs == ["t2"] and [s[0] for s in prog.nodes[1].attrs["steps"]] == ["select", "slice"]
    prog.validate()
    for a, b in zip(run_reference(prog, x, f), want):
        np.testing.assert_array_equal(a, b)
    ex = VulkanExecutor(prog, loads_device)
    for name, a, b in zip(["y", "z", "t2", "g"], ex(x, f), want):
        np.testing.assert_array_equal(a, b)
        if name != "g":
            np.testing.assert_array_equal(ex.buffers[name].read(), packing.pack(b, prog.tensors[name].layout))
    windows = x.reshape(1, 2, 3, 2, 3, 10).transpose(0, 1, 3, 2, 4, 5).reshape(4, 9, 10)
    np.testing.assert_array_equal(want[2], windows)
    np.testing.assert_array_equal(want[0], windows[2][:, 2:8])


@pytest.mark.parametrize("steps,match", [
    ([["permute", {"dims": [1, 0]}, [4, 6], [6, 4]]], "from \\(4, 6\\)"),           # not the input's shape
    ([["cat", {"dim": 0}, [6, 4], [6, 4]]], "step cat"),                              # not a gather op
    ([["slice", {"dim": 0, "start": 0, "end": 6}, [6, 4], [9, 4]]], "reads source elements"),
    ([["select", {"dim": 0, "index": 1}, [6, 4], [4]]], "end at \\(4,\\)"),       # not the output's shape
    ([], "no steps")])
def test_malformed_view_chains_are_refused(device, steps, match):
    """A view_chain from a program file whose steps do not run from its input to its output,
    or read past a tensor, is refused with a message naming it, not run."""
    prog = single_op_program("view_chain", [("x", spec((6, 4), "int8", "4W4C", 0.1, 3))],
                             [("y", spec((6, 4), "int8", "4W4C", 0.1, 3))], {"steps": steps})
    with pytest.raises(ValueError, match=match):
        VulkanExecutor(prog, device)(values((6, 4), "int8"))


# ---------------------------------------------------------------- without a device

def test_row_layout_packs_any_rank():
    q = random_int8(R, (2, 3, 1, 5, 7, 3))
    words = packing.pack(q, "ROW")
    assert words.size == packing.packed_size(q.shape, "ROW") == -(-q.size // 16) * 4
    np.testing.assert_array_equal(words.view(np.int8)[:q.size], q.reshape(-1))
    assert not words.view(np.int8)[q.size:].any()
    np.testing.assert_array_equal(packing.unpack(words, "ROW", q.shape), q)
    with pytest.raises(ValueError, match="ROW"):
        packing.pack(q, "4W4C")


def test_registry_decides_per_node():
    """One name for every dtype: a float copy past float_copy's 6 merged dims declines (the node
    runs on the CPU, with the reason); the same op on int8 (any rank) and an int8 op given a ROW
    tensor its kernel does not read are told apart by their specs."""
    shape = (2, 3, 2, 3, 2, 3, 2)
    dims = [6, 5, 4, 3, 2, 1, 0]
    out = tuple(shape[d] for d in dims)
    node = Node("permute", ["x"], ["y"], {"dims": dims})
    f32 = {"x": spec(shape), "y": spec(out)}
    assert "7 dims" in cpu_reason(node, f32)
    int8 = {"x": spec(shape, "int8", "ROW"), "y": spec(out, "int8", "ROW")}
    assert cpu_reason(node, int8) is None
    row = {t: spec((2, 3, 5, 7, 2), "int8", "ROW") for t in "abc"}
    assert "ROW" in cpu_reason(Node("cat_q8", ["a", "b"], ["c"], {}), row)
    assert cpu_reason(Node("add_q8", ["a", "b"], ["c"], {}), row) is None     # (its kernel reads ROW)
    assert cpu_reason(Node("torch_op", ["x"], ["y"], {}), f32) == "torch_op: no Vulkan kernel"


def test_cat_skips_legacy_empty_inputs(device):
    """torch.cat([torch.empty(0), x]) is x (GPT-2's empty past keys): the gather skips it."""
    x = values((2, 3, 5), "float32")
    empty = np.zeros((0,), np.float32)
    prog = single_op_program("cat", [("e", spec((0,))), ("x", spec(x.shape))], [("y", spec(x.shape))], {"dim": 2})
    assert cpu_reason(prog.nodes[0], prog.tensors) is None
    np.testing.assert_array_equal(VulkanExecutor(prog, device)(empty, x), x)
    np.testing.assert_array_equal(run_reference(prog, empty, x), x)


def test_program_files_with_the_old_float_twin_names_load(tmp_path, monkeypatch):
    """Files saved when the shape ops had float twins (reshape_f32, ...) load as the one op."""
    from vkq.program import Program
    from vkq.progfile import load_program, save_program
    x = values((2, 3, 4), "float32")
    prog = single_op_program("permute", [("x", spec(x.shape))], [("y", spec((4, 2, 3)))], {"dims": [2, 0, 1]})
    prog.nodes[0].op = "permute_f32"
    with monkeypatch.context() as m:
        m.setattr(Program, "validate", lambda self: None)     # today's save refuses the old name
        save_program(prog, tmp_path / "old.vkq")
    loaded = load_program(tmp_path / "old.vkq")
    assert [n.op for n in loaded.nodes] == ["permute"]
    np.testing.assert_array_equal(run_reference(loaded, x), x.transpose(2, 0, 1))


@pytest.mark.parametrize("dims", [[["keep"], ["mirror", 1, 1]], [["keep"], ["reflect", -1, 2]], [["keep"]],
                                  [["keep"], ["roll", 1.5]], [["keep"], "flip"], [["keep"], ["pick"]],
                                  [["keep"], ["pick", 1, -2]], [["keep"], ["pick", 5]], [["keep"], ["tile", 0]],
                                  [["keep"], ["tile"]], [["keep"], ["reflect", 1, 2, 3]]])
def test_remap_refuses_malformed_maps_by_name(dims):
    """A program file's remap whose maps are not [kind, ints] of its rank (an unknown kind, a
    negative pad, a float shift, no or a negative pick, a pick past the dim, no or zero tiles)
    is refused with a message naming the op."""
    with pytest.raises(ValueError, match="remap: "):
        get_op("remap").reference(np.zeros((2, 5), np.float32), dims=dims)
