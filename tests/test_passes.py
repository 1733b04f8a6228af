"""Each lowering pass on its own: build a tiny module, export, prepare, calibrate, convert, run
the passes up to the one under test, then assert on the graph (and, while the graph is still
plain torch, that it computes the same numbers as before the pass)."""
import copy
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vkq.ops.cpu  # noqa: F401  (CPU ops register on import)
from vkq import api
from vkq.passes import PIPELINE, run_pipeline
from vkq.passes._graph import HOST_FLOAT64, QUANTIZE, DEQUANTIZE, is_vkq, op_name, record_shapes, vkq_op_of
from vkq.passes.assign_layouts import assign_layouts
from vkq.passes.drop_cancelling_qdq import drop_cancelling_qdq
from vkq.passes.drop_guards import drop_guards
from vkq.passes.fold_constants import fold_constant_computations, fold_constants
from vkq.passes.fold_qdq_patterns import fold_qdq_patterns
from vkq.passes.fuse_activation import fuse_activation
from vkq.passes.fuse_epilogue import fuse_epilogue
from vkq.passes.lift_quantize import lift_quantize
from vkq.passes.normalize_ops import normalize_ops
from vkq.passes.views_to_repack import views_to_repack

warnings.filterwarnings("ignore", category=UserWarning)
aten = torch.ops.aten
qd = torch.ops.quantized_decomposed


class ConvNet(nn.Module):
    """conv-relu -> conv-relu6 -> maxpool -> flatten -> linear (prime-ish sizes)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 5, 3, padding=1)
        self.c2 = nn.Conv2d(5, 7, 3)
        self.fc = nn.Linear(7 * 2 * 2, 11)

    def forward(self, x):
        x = F.relu6(self.c2(F.relu(self.c1(x))))
        return self.fc(torch.flatten(F.max_pool2d(x, 2), 1))


_CACHE = {}


def converted(model, x, **kw):
    """The converted PT2E graph (quantized once per model and input, then copied)."""
    key = (id(model), tuple(x.shape), tuple(sorted((k, id(v)) for k, v in kw.items())))
    if key not in _CACHE:                  # the model is kept too, so that its id is not reused
        torch.manual_seed(1)
        _CACHE[key] = (model, api.quantize(model.eval(), (x,), progress=False, **kw,
                                           calibration=[(torch.randn_like(x),) for _ in range(3)]))
    return copy.deepcopy(_CACHE[key][1])


def prepared(model, x, upto=None, **kw):
    """(converted PT2E graph, a copy with shapes recorded and the passes before `upto` run)."""
    gm = converted(model, x, **kw)
    work = copy.deepcopy(gm)
    record_shapes(work, (x,))
    before = PIPELINE if upto is None else PIPELINE[:PIPELINE.index(upto)]
    run_pipeline(work, before)
    return gm, work


def targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def vkq_ops(gm):
    return [vkq_op_of(n) for n in gm.graph.nodes if is_vkq(n)]


def same_numbers(a, b, x):
    with torch.no_grad():
        ra, rb = a(x), b(x)
    ra, rb = (ra[0] if isinstance(ra, tuple) else ra), (rb[0] if isinstance(rb, tuple) else rb)
    assert torch.equal(ra, rb)


X = torch.randn(2, 3, 7, 7)


@pytest.fixture(scope="module")
def convnet():
    torch.manual_seed(0)
    return ConvNet().eval()


def test_pipeline_is_an_ordered_list_linted_after_each_pass(convnet):
    names = [p.__name__ for p in PIPELINE]
    assert names == ["inline_wrappers", "drop_guards", "unroll_rnn", "normalize_ops", "fuse_kv_write",
                     "fold_constant_computations", "fuse_activation",
                     "lift_quantize", "drop_cancelling_qdq", "fold_qdq_patterns", "int8_embeddings", "decompose_ops",
                     "fuse_epilogue", "fuse_float_epilogue", "fuse_rms_norm",
                     "permute_in_float", "fake_quantize", "views_to_repack", "fold_constants", "assign_layouts"]
    _, gm = prepared(convnet, X, upto=PIPELINE[0])
    report = run_pipeline(gm)
    assert list(report) == names and all(isinstance(c, bool) for c, _ in report.values())


def test_drop_guards(convnet):
    _, gm = prepared(convnet, X, upto=drop_guards)
    assert any(n.op == "call_module" for n in gm.graph.nodes)
    assert drop_guards(gm)
    assert not any(n.op == "call_module" for n in gm.graph.nodes)
    assert not drop_guards(gm)


def test_normalize_ops_decomposed_spellings():
    """Re-export + run_decompositions: convolution, permute + addmm, max_pool2d_with_indices and
    mean.dim come back as conv2d, linear, max_pool2d and adaptive_avg_pool2d, same numbers."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.fc = nn.Conv2d(3, 5, 3), nn.Linear(5, 4)

        def forward(self, x):
            return self.fc(F.max_pool2d(F.relu(self.c(x)), 2).mean((2, 3)))
    torch.manual_seed(0)
    gm = converted(M(), X)
    dec = torch.export.export(gm, (X,)).run_decompositions().module()
    assert aten.convolution.default in targets(dec) and aten.addmm.default in targets(dec)
    work = copy.deepcopy(dec)
    record_shapes(work, (X,))
    drop_guards(work)
    assert normalize_ops(work)
    t = targets(work)
    for gone in (aten.convolution.default, aten.addmm.default, aten.max_pool2d_with_indices.default, aten.mean.dim):
        assert gone not in t
    for there in (aten.conv2d.default, aten.linear.default, aten.max_pool2d.default, aten.adaptive_avg_pool2d.default):
        assert there in t
    same_numbers(dec, work, X)


def test_fuse_activation_moves_relu_into_the_quantize_range(convnet):
    gm, work = prepared(convnet, X, upto=fuse_activation)
    assert aten.relu.default in targets(work) and aten.hardtanh.default in targets(work)
    assert fuse_activation(work)
    assert aten.relu.default not in targets(work) and aten.hardtanh.default not in targets(work)
    conv_qs = [next(iter(n.users)) for n in work.graph.nodes if n.target == aten.conv2d.default]
    assert all(q.target in QUANTIZE for q in conv_qs)            # conv -> q directly
    relu6_q = conv_qs[1]
    scale, zp, qmin, qmax = relu6_q.args[1:5]
    assert qmin == max(-128, zp) and qmax == min(127, int(np.rint(6 / scale)) + zp)
    same_numbers(gm, work, X)                                     # exact: clamp commutes with quantize


def test_fuse_activation_keeps_a_relu_with_a_float_user():
    class M(nn.Module):
        def forward(self, x):
            return torch.sigmoid(F.relu(x))
    x = torch.randn(2, 5)
    _, work = prepared(M(), x, upto=fuse_activation)
    assert not fuse_activation(work)
    assert aten.relu.default in targets(work)


def test_lift_quantize_puts_the_view_on_int8():
    """dq -> avg_pool -> flatten -> q (XNNPACK leaves avg_pool unannotated) becomes
    avg_pool -> q -> flatten(int8), so that dq -> avg_pool -> q can fold."""
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.fc = nn.Conv2d(3, 4, 3), nn.Linear(4 * 2 * 2, 3)

        def forward(self, x):
            return self.fc(torch.flatten(F.avg_pool2d(self.c(x), 2), 1))
    x = torch.randn(2, 3, 6, 6)
    q = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    gm, work = prepared(M(), x, upto=lift_quantize, quantizer=q)
    (flat,) = [n for n in work.graph.nodes if n.target == aten.flatten.using_ints]
    assert flat.args[0].target == aten.avg_pool2d.default
    assert lift_quantize(work)
    (flat,) = [n for n in work.graph.nodes if n.target == aten.flatten.using_ints]
    assert flat.args[0].target in QUANTIZE and flat.meta["val"].dtype == torch.int8
    (pool,) = [n for n in work.graph.nodes if n.target == aten.avg_pool2d.default]
    assert [u.target for u in pool.users] == [qd.quantize_per_tensor.default]
    same_numbers(gm, work, x)


def test_lift_quantize_merges_identical_quantizes():
    """Two quantizes of one tensor with one set of parameters, behind two views: one quantize,
    right after the tensor, and the views on int8."""
    class M(nn.Module):
        def forward(self, x):
            qa = qd.quantize_per_tensor(x.view(2, 15), 0.05, 3, -128, 127, torch.int8)
            qb = qd.quantize_per_tensor(x.reshape(2, 15), 0.05, 3, -128, 127, torch.int8)
            da = qd.dequantize_per_tensor(qa, 0.05, 3, -128, 127, torch.int8)
            db = qd.dequantize_per_tensor(qb, 0.05, 3, -128, 127, torch.int8)
            return da + 1, db * 2
    x = torch.randn(2, 3, 5)
    gm = torch.export.export(M(), (x,)).module()
    work = copy.deepcopy(gm)
    record_shapes(work, (x,))
    assert len([n for n in work.graph.nodes if n.target in QUANTIZE]) == 2
    assert lift_quantize(work)
    qs = [n for n in work.graph.nodes if n.target in QUANTIZE]
    assert len(qs) == 1 and qs[0].args[0].op == "placeholder"
    same_numbers(gm, work, x)


def test_drop_cancelling_qdq(convnet):
    gm, work = prepared(convnet, X, upto=drop_cancelling_qdq)
    pairs = [n for n in work.graph.nodes if n.target in QUANTIZE and n.args[0].target in DEQUANTIZE]
    assert pairs                                                   # maxpool / flatten edges
    assert drop_cancelling_qdq(work)
    assert not [n for n in work.graph.nodes if n.target in QUANTIZE and n.args[0].target in DEQUANTIZE]
    same_numbers(gm, work, X)


def _attr(gm, node):
    obj = gm
    for part in node.target.split("."):
        obj = getattr(obj, part)
    return obj


def test_fold_qdq_patterns_conv_and_linear(convnet):
    gm, work = prepared(convnet, X, upto=fold_qdq_patterns)
    assert fold_qdq_patterns(work)
    assert vkq_ops(work) == ["conv2d_q8", "conv2d_q8", "max_pool2d_q8", "linear_q8"]
    assert aten.conv2d.default not in targets(work) and aten.linear.default not in targets(work)
    conv = next(n for n in work.graph.nodes if is_vkq(n, "conv2d_q8"))
    x, w, b, m, s = conv.args
    weight, bias = _attr(work, w), _attr(work, b)
    assert x.meta["val"].dtype == torch.int8
    assert weight.dtype == torch.int8 and tuple(weight.shape) == (5, 3, 3, 3)
    assert bias.dtype == torch.float64 and _attr(work, m).dtype == torch.int32 and _attr(work, s).dtype == torch.int32
    assert b.meta[HOST_FLOAT64]                                     # lowered as float64, its fraction kept
    assert conv.kwargs["stride"] == [1, 1] and conv.kwargs["padding"] == [1, 1] and conv.kwargs["groups"] == 1
    # against the PT2E graph: same int8 weight, bias = b / (s_x * s_w) unrounded, relu as qmin
    pt_conv = next(n for n in gm.graph.nodes if n.target == aten.conv2d.default)
    dq_x, dq_w, b_float = pt_conv.args[:3]
    assert torch.equal(weight, _attr(gm, dq_w.args[0]))
    s_w = _attr(gm, dq_w.args[1]).double()
    expect = _attr(gm, b_float).double() / (dq_x.args[1] * s_w)
    assert torch.equal(bias, expect) and not torch.equal(bias, torch.round(bias))
    assert conv.kwargs["x_zp"] == dq_x.args[2]
    assert conv.kwargs["qmin"] == conv.kwargs["out_zp"]            # the fused relu: qmin = quantize(0)


def test_fold_qdq_patterns_records_why_not():
    """A conv whose output feeds a float op unquantized cannot be an int8 op: it stays, with a reason."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return torch.tanh(self.c(x))
    x = torch.randn(1, 3, 6, 6)
    gm = converted(M(), x)
    # drop the output quantize PT2E put after the conv: the conv output is then float
    for n in list(gm.graph.nodes):
        if n.target == aten.conv2d.default:
            q = next(iter(n.users))
            dq = next(iter(q.users))
            dq.replace_all_uses_with(n)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    work = copy.deepcopy(gm)
    record_shapes(work, (x,))
    run_pipeline(work, PIPELINE[:PIPELINE.index(fold_qdq_patterns) + 1])
    (conv,) = [n for n in work.graph.nodes if n.target == aten.conv2d.default]
    assert conv.meta["vkq_reject"].startswith("aten.conv2d: output is not quantized")


def test_views_to_repack_and_layouts(convnet):
    """Conv chain 4W4C, linear input 4H4W, the flatten between them one repack with the shape."""
    _, work = prepared(convnet, X, upto=views_to_repack)
    assert views_to_repack(work)
    fold_constants(work)
    assert assign_layouts(work)
    layouts = {n.name: (vkq_op_of(n) or str(n.target), n.meta.get("vkq_layout"))
               for n in work.graph.nodes if n.meta.get("vkq_layout")}
    ops = [v for v in layouts.values() if not v[0].startswith("_")]
    assert ops == [("quantized_decomposed.quantize_per_tensor.default", "4W4C"), ("conv2d_q8", "4W4C"), ("conv2d_q8", "4W4C"),
                   ("max_pool2d_q8", "4W4C"), ("repack", "4H4W")]    # the linear: float out (dequant fused)
    (repack,) = [n for n in work.graph.nodes if is_vkq(n, "repack")]
    assert repack.kwargs["shape"] == [2, 28]
    assert vkq_op_of(next(iter(repack.users))) == "linear_q8"


def test_assign_layouts_inserts_a_repack_only_where_needed():
    """One quantized input read by a conv (4W4C) and a linear (4H4W), summed by an add (which
    fuse_epilogue folds into the conv: its residual operand is then an input that needs 4W4C)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.fc = nn.Conv2d(4, 4, 1), nn.Linear(5, 5)

        def forward(self, x):
            return self.c(x) + self.fc(x)
    x = torch.randn(1, 4, 5, 5)
    _, work = prepared(M(), x, upto=assign_layouts)
    assign_layouts(work)
    lin = next(n for n in work.graph.nodes if is_vkq(n, "linear_q8"))
    conv = next(n for n in work.graph.nodes if is_vkq(n, "conv2d_q8"))
    # the fused conv stands where the add stood, after the linear: the input is quantized 4H4W
    # for the linear, the conv reads a 4W4C copy, and the linear's 4H4W output is repacked to
    # the conv's 4W4C residual: two repacks, no more
    repacks = [n for n in work.graph.nodes if is_vkq(n, "repack")]
    assert len(repacks) == 2 and not any(is_vkq(n, "add_q8") for n in work.graph.nodes)
    assert lin.args[0].target in QUANTIZE and lin.args[0].meta["vkq_layout"] == "4H4W"
    assert is_vkq(conv.args[0], "repack") and conv.args[0].meta["vkq_layout"] == "4W4C"
    assert conv.meta["vkq_layout"] == "4W4C" and "residual" in conv.kwargs
    assert is_vkq(conv.args[5], "repack") and conv.args[5].args[0] is lin and conv.args[5].meta["vkq_layout"] == "4W4C"


def test_moves_of_row_major_tensors_keep_their_rows():
    """q, k, v selected out of a packed (3, B, heads, N, d) projection (Swin's windows) with no
    consumer asking a layout (a dequantize): 4H4W, whose bytes run along d as the ROW source's do
    (a word-moving gather), not the 4-D default 4W4C (bytes along the 3 heads)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(16, 48)

        def forward(self, x):
            b, n, _ = x.shape
            t = self.qkv(x).reshape(b, n, 3, 2, 8).permute(2, 0, 3, 1, 4)
            q, k, v = t[0], t[1], t[2]          # (as torchvision's Swin picks them)
            return torch.softmax(q @ k.transpose(-2, -1), -1) @ v
    x = torch.randn(2, 7, 16)
    _, work = prepared(M(), x, upto=assign_layouts)
    assign_layouts(work)
    picks = [n for n in work.graph.nodes if n.target == aten.select.int]
    assert len(picks) == 3 and {n.args[0].meta["vkq_layout"] for n in picks} == {"ROW"}
    assert {n.meta["vkq_layout"] for n in picks} == {"4H4W"}


def test_fold_constants_float_weights_for_cpu_ops():
    """A float conv (input not quantized) keeps its dequantized int8 weight: computed once."""
    from vkq.quantizer import VkqQuantizer

    class Q(VkqQuantizer):                        # weights only, as a partial quantizer might do
        def annotate(self, model):
            from vkq.quantizer import _annotate, weight_spec
            for n in model.graph.nodes:
                if n.target == aten.conv2d.default:
                    _annotate(n, {n.args[1]: weight_spec()})
            return model

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            return self.c(x)
    x = torch.randn(1, 3, 6, 6)
    gm, work = prepared(M(), x, upto=fold_constants, quantizer=Q())
    assert qd.dequantize_per_channel.default in targets(work)
    assert fold_constants(work)
    assert qd.dequantize_per_channel.default not in targets(work)
    (conv,) = [n for n in work.graph.nodes if n.target == aten.conv2d.default]
    assert conv.args[1].op == "get_attr" and getattr(work, conv.args[1].target).dtype == torch.float32
    same_numbers(gm, work, x)


def test_fold_constants_tensor_factories(device):
    """x.new_zeros / zeros_like / new_full take x for its dtype and shape only: with a static
    shape they (and the float work on them alone: Swin's attention mask) are constants, so
    nothing runs on the CPU; the numbers stay the same."""
    from vkq.lower import lower
    from vkq.registry import get_op

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.c = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.c(x)
            mask = y.new_zeros((5, 5)) + torch.zeros_like(y[0, 0]) + y.new_full((5, 5), 2.0)
            mask = mask.masked_fill(torch.ones_like(mask).tril() != 0, -1.0)
            return y + mask
    x = torch.randn(1, 3, 7, 7)
    gm, work = prepared(M(), x, upto=fold_constants)
    names = {op_name(t) for t in targets(work)}
    assert {"aten.new_zeros", "aten.zeros_like", "aten.new_full", "aten.ones_like"} <= names
    assert fold_constants(work)
    names = {op_name(t) for t in targets(work)}
    assert not names & {"aten.new_zeros", "aten.zeros_like", "aten.new_full", "aten.ones_like"}
    same_numbers(gm, work, x)
    program = lower(converted(M(), x), (x,))
    assert all(get_op(n.op).on_vulkan for n in program.nodes), [n.op for n in program.nodes]
    from vkq.executor import VulkanExecutor, run_reference
    np.testing.assert_array_equal(VulkanExecutor(program, device)(x.numpy()), run_reference(program, x.numpy()))



class PositionBias(nn.Module):
    """Swin-V2's continuous position bias: an MLP over a constant table of coordinates, gathered
    to (heads, n, n) and squashed, added to scores that depend on the input; and a conv whose
    weight is standardized on every call (BiT's StdConv) from its parameter."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 2))
        self.register_buffer("coords", torch.stack(torch.meshgrid(torch.linspace(-1, 1, 7), torch.linspace(-1, 1, 7),
                                                                  indexing="ij"), -1))
        self.register_buffer("index", torch.randint(0, 49, (16, 16), generator=torch.Generator().manual_seed(1)))
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.q = nn.Linear(16, 16)

    def forward(self, x):
        bias = self.mlp(self.coords).view(-1, 2)[self.index.view(-1)].view(16, 16, 2).permute(2, 0, 1)
        s = self.q(x) @ x.transpose(-2, -1) + 16 * torch.sigmoid(bias)
        w = self.conv.weight
        w = (w - w.mean((1, 2, 3), keepdim=True)) / (w.var((1, 2, 3), keepdim=True) + 1e-5).sqrt()
        return torch.nn.functional.conv2d(s.unsqueeze(0), w, self.conv.bias, padding=1)


def test_fold_constant_computations_runs_constant_work_once(device):
    """What follows from constants only is a constant before the q/dq patterns fold: the bias
    MLP, its gather and sigmoid are no ops of the program (they ran as int8 linears and tables
    on every call); the standardized weight is a constant that the conv still takes as int8
    (conv2d_q8). The reference equals PT2E op by op, Vulkan the reference."""
    from vkq.lower import lower
    from vkq.executor import VulkanExecutor, run_reference
    from test_lower import assert_matches_pt2e
    x = torch.randn(2, 16, 16)
    gm, work = prepared(PositionBias().eval(), x, upto=fold_constant_computations)
    assert {"aten.linear", "aten.var", "aten.sigmoid", "aten.index"} <= {op_name(t) for t in targets(work)}
    assert fold_constant_computations(work)
    left = {op_name(t) for t in targets(work)}
    assert not left & {"aten.sigmoid", "aten.relu", "aten.var", "aten.index"}, left
    assert len([n for n in work.graph.nodes if n.target == aten.linear.default]) == 1       # q(x) only
    same_numbers(gm, work, x)
    gm = converted(PositionBias().eval(), x)
    program = lower(gm, (x,))
    ops = [n.op for n in program.nodes]
    assert ops.count("linear_q8") == 1 and "conv2d_q8" in ops and "lut_q8" not in ops and "take" not in ops, ops
    np.testing.assert_array_equal(VulkanExecutor(program, device)(x.numpy()), run_reference(program, x.numpy()))
    assert assert_matches_pt2e(program, gm, x, min_cos=0.999) >= 3

def test_fold_constant_computations_views_any_stored_strides():
    """A view of a constant whose stored strides are not those the graph was traced with (MRA's
    permuted table, folded to a constant and viewed: 'view size is not compatible') folds to the
    value it views; constants are stored contiguous."""
    from vkq.passes._graph import add_constant, set_val
    gm = torch.fx.GraphModule(nn.Module(), torch.fx.Graph())
    x = gm.graph.placeholder("x")
    out = gm.graph.output(None)
    table = torch.arange(24.0).reshape(2, 3, 4)
    gm.register_buffer("permuted", table.permute(1, 0, 2))         # (3, 2, 4), not contiguous
    with gm.graph.inserting_before(out):
        c = gm.graph.get_attr("permuted")
        flat = gm.graph.call_function(aten.view.default, (c, [3, 8]))
        y = gm.graph.call_function(aten.add.Tensor, (x, gm.graph.call_function(aten.mul.Tensor, (flat, 2.0))))
    out.args = (y,)
    for n, shape in ((x, (3, 8)), (c, (3, 2, 4)), (flat, (3, 8)), (flat.next, (3, 8)), (y, (3, 8))):
        set_val(n, shape, torch.float32)
    assert fold_constant_computations(gm)
    assert {op_name(t) for t in targets(gm)} == {"aten.add"}
    np.testing.assert_array_equal(gm(torch.zeros(3, 8)), table.permute(1, 0, 2).reshape(3, 8) * 2)
    assert add_constant(gm, "t", table.transpose(0, 2), y).meta["val"].shape == (4, 3, 2)
    assert gm._vkq_t.is_contiguous()


def test_inline_wrappers_splices_no_grad_and_autocast_blocks():
    """export keeps `with torch.no_grad()` / `torch.autocast(enabled=False)` blocks as higher-order
    ops on submodules (a get_attr that is no tensor: the lowering once crashed on it); after
    inline_wrappers their nodes stand in the graph and the model lowers, the linear inside int8."""
    from vkq.lower import lower
    from vkq.passes.inline_wrappers import inline_wrappers

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 5)
            self.register_buffer("inv", torch.rand(8))

        def forward(self, x):
            with torch.no_grad():
                f = x[..., :8] * self.inv
            with torch.autocast("cpu", enabled=False):
                g = torch.cos(f.float())
            return self.fc2(self.fc(g))
    x = torch.randn(2, 3, 8)
    with torch.enable_grad():       # (under no_grad, export has no no_grad block to keep)
        gm = torch.export.export(M().eval(), (x,)).module()
        q = api.quantize(M().eval(), (x,), progress=False)
    hops = lambda g: [n for n in g.graph.nodes if str(n.target).startswith("wrap_with")]
    assert len(hops(gm)) == 2
    ref = gm(x)
    assert inline_wrappers(gm) and not hops(gm)
    assert torch.equal(gm(x), ref)
    program = lower(q, (x,))
    assert [n.op for n in program.nodes].count("linear_q8") + [n.op for n in program.nodes].count("linear_q8_fout") == 2


class ResidualNet(nn.Module):
    """A ResNet basic block with a downsampling branch (add of two convs, then relu), a block
    with an identity add, and a conv whose output is also read by a pool (not fusable)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 6, 3, 2, 1), nn.Conv2d(6, 6, 3, 1, 1)
        self.down = nn.Conv2d(3, 6, 1, 2)
        self.c3 = nn.Conv2d(6, 6, 3, 1, 1, groups=6)
        self.c4 = nn.Conv2d(6, 6, 1)

    def forward(self, x):
        y = F.relu(self.c2(F.relu(self.c1(x))) + self.down(x))
        y = self.c3(y) + y                          # identity add: the depthwise conv gets it
        z = self.c4(y)
        return z + F.max_pool2d(z, 3, 1, 1)         # z is read twice: no fusion


XR = torch.randn(1, 3, 9, 11)


def test_fuse_epilogue_folds_residual_adds():
    torch.manual_seed(0)
    model = ResidualNet().eval()
    _, work = prepared(model, XR, upto=fuse_epilogue)
    before = copy.deepcopy(work)
    assert vkq_ops(before).count("add_q8") == 3
    assert fuse_epilogue(work)
    ops = vkq_ops(work)
    assert ops.count("add_q8") == 1 and ops.count("conv2d_q8") == 5
    fused = [n for n in work.graph.nodes if is_vkq(n, "conv2d_q8") and "residual" in n.kwargs]
    assert len(fused) == 2
    down_add = next(n for n in before.graph.nodes if is_vkq(n, "add_q8"))
    res = fused[0].kwargs["residual"]
    assert res == {"conv_input": "a", **down_add.kwargs} and res["qmin"] == res["out_zp"]   # the relu after the add
    down = fused[0].args[5]             # the other operand: the downsampling branch's conv
    assert len(fused[0].args) == 6 and is_vkq(down, "conv2d_q8") and down.kwargs["stride"] == [2, 2]
    same_numbers(before, work, XR)            # the fused ops' references are the compositions
    assert not fuse_epilogue(work)            # nothing left to fuse


def test_fuse_epilogue_end_to_end(device, monkeypatch):
    """The compiled program has 2 nodes fewer with the fusion, and Vulkan equals its reference,
    which equals the unfused program's reference bit for bit."""
    from vkq.executor import VulkanExecutor, run_reference
    from vkq.lower import lower
    import vkq.passes.pipeline as pipeline
    torch.manual_seed(0)
    model = ResidualNet().eval()
    gm = converted(model, XR)
    fused = lower(gm, (XR,))
    monkeypatch.setattr(pipeline, "PIPELINE", [p for p in pipeline.PIPELINE if p is not fuse_epilogue])
    plain = lower(gm, (XR,))
    assert len(fused.nodes) == len(plain.nodes) - 2
    assert sum(n.op == "add_q8" for n in fused.nodes) == 1
    x = XR.numpy()
    want = run_reference(plain, x)
    np.testing.assert_array_equal(run_reference(fused, x), want)
    np.testing.assert_array_equal(VulkanExecutor(fused, device)(x), want)


class TableNet(nn.Module):
    """Activations that are lookup tables after convs: hardswish after a 3x3 conv, silu after a
    pointwise conv's residual add, sigmoid after a depthwise conv, and a hardswish whose conv
    is also read by a pool (not fusable)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 5, 3, 1, 1), nn.Conv2d(5, 5, 1)
        self.c3, self.c4 = nn.Conv2d(5, 5, 3, 1, 1, groups=5), nn.Conv2d(5, 7, 1)

    def forward(self, x):
        h = F.hardswish(self.c1(x))
        h = F.silu(self.c2(h) + h)                  # residual add, then the table
        h = torch.sigmoid(self.c3(h))
        z = self.c4(h)
        return F.hardswish(z) + F.max_pool2d(z, 3, 1, 1)


def test_fuse_epilogue_folds_tables():
    torch.manual_seed(0)
    _, work = prepared(TableNet().eval(), XR, upto=fuse_epilogue)
    before = copy.deepcopy(work)
    assert vkq_ops(before).count("lut_q8") == 4
    assert fuse_epilogue(work)
    ops = vkq_ops(work)
    assert ops.count("lut_q8") == 1 and ops.count("conv2d_q8") == 4 and ops.count("add_q8") == 1
    with_table = [n for n in work.graph.nodes if is_vkq(n, "conv2d_q8") and n.kwargs.get("lut")]
    assert len(with_table) == 3 and sum("residual" in n.kwargs for n in with_table) == 1
    assert all(n.args[-1].op == "get_attr" for n in with_table)      # the table, last input
    same_numbers(before, work, XR)            # the fused ops' references are the compositions
    assert not fuse_epilogue(work)


def test_fuse_epilogue_tables_end_to_end(device, monkeypatch):
    """3 dispatches fewer, Vulkan equals the reference, which equals the unfused program's."""
    from vkq.executor import VulkanExecutor, run_reference
    from vkq.lower import lower
    import vkq.passes.pipeline as pipeline
    torch.manual_seed(0)
    gm = converted(TableNet().eval(), XR)
    fused = lower(gm, (XR,))
    monkeypatch.setattr(pipeline, "PIPELINE", [p for p in pipeline.PIPELINE if p is not fuse_epilogue])
    plain = lower(gm, (XR,))
    assert len(fused.nodes) == len(plain.nodes) - 4            # 3 tables and 1 add folded
    x = XR.numpy()
    want = run_reference(plain, x)
    np.testing.assert_array_equal(run_reference(fused, x), want)
    np.testing.assert_array_equal(VulkanExecutor(fused, device)(x), want)


class MLP(nn.Module):
    """A transformer's FFN: linear -> GELU -> linear, the GELU a table after the first linear."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(21, 37), nn.Linear(37, 13)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


def test_fuse_epilogue_tables_after_linears(device, monkeypatch):
    from vkq.executor import VulkanExecutor, run_reference
    from vkq.lower import lower
    import vkq.passes.pipeline as pipeline
    torch.manual_seed(0)
    x = torch.randn(2, 5, 21)
    gm = converted(MLP().eval(), x)
    fused = lower(gm, (x,))
    assert [n.op for n in fused.nodes] == ["quantize", "linear_q8", "linear_q8"]
    assert fused.nodes[1].attrs["lut"] and not fused.nodes[2].attrs.get("lut")
    assert fused.nodes[2].attrs["dequant"] and fused.tensors[fused.nodes[2].outputs[0]].dtype == "float32"
    monkeypatch.setattr(pipeline, "PIPELINE", [p for p in pipeline.PIPELINE if p is not fuse_epilogue])
    plain = lower(gm, (x,))
    assert [n.op for n in plain.nodes] == ["quantize", "linear_q8", "lut_q8", "linear_q8", "dequantize"]
    want = run_reference(plain, x.numpy())
    np.testing.assert_array_equal(run_reference(fused, x.numpy()), want)
    np.testing.assert_array_equal(VulkanExecutor(fused, device)(x.numpy()), want)


class TwoOutputs(nn.Module):
    """A linear whose int8 output is both a network output (a dequantize) and the next linear's
    input: that dequantize must not fold (the next linear reads the int8 tensor); the last one does."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(21, 37), nn.Linear(37, 13)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(h), h


def test_fuse_epilogue_dequantize_only_for_a_sole_reader(device, monkeypatch):
    from vkq.executor import VulkanExecutor, run_reference
    from vkq.lower import lower
    import vkq.passes.pipeline as pipeline
    torch.manual_seed(0)
    x = torch.randn(3, 21)
    gm = converted(TwoOutputs().eval(), x)
    fused = lower(gm, (x,))
    assert [n.op for n in fused.nodes] == ["quantize", "linear_q8", "dequantize", "linear_q8"]
    assert not fused.nodes[1].attrs.get("dequant") and fused.nodes[3].attrs["dequant"]
    monkeypatch.setattr(pipeline, "PIPELINE", [p for p in pipeline.PIPELINE if p is not fuse_epilogue])
    plain = lower(gm, (x,))
    want = run_reference(plain, x.numpy())
    got_ref, got = run_reference(fused, x.numpy()), VulkanExecutor(fused, device)(x.numpy())
    for w, r, g in zip(want, got_ref, got):
        assert w.dtype == np.float32 and len(np.unique(w)) > 8
        np.testing.assert_array_equal(r, w)
        np.testing.assert_array_equal(g, w)


def test_conv_transpose_as_conv_pixel_shuffle_and_crop():
    """The identity conv_transpose_as_conv rests on, in float64 over random geometries (strides
    equal, or 1 in one dim as a 1-D transposed conv has): conv_transpose2d == crop(phases
    interleaved(conv2d(x, phase weights, repeated bias)))."""
    import math
    import numpy as np
    import torch.nn.functional as F
    from vkq.passes.conv_transpose_as_conv import phase_weights
    rng = np.random.default_rng(0)
    done = 0
    while done < 80:
        s = int(rng.integers(1, 4))
        stride = [(s, s), (1, s), (s, 1)][int(rng.integers(0, 3))]
        kh, kw, g = int(rng.integers(1, 6)), int(rng.integers(1, 6)), int(rng.choice([1, 2, 3]))
        c, ocg = g * int(rng.integers(1, 4)), int(rng.integers(1, 4))
        p = [int(rng.integers(0, kh)), int(rng.integers(0, kw))]
        op = [int(rng.integers(0, stride[0])), int(rng.integers(0, stride[1]))]
        x = torch.randn(2, c, int(rng.integers(1, 8)), int(rng.integers(1, 8)), dtype=torch.float64)
        w = torch.randn(c, ocg, kh, kw, dtype=torch.float64)
        b = torch.randn(ocg * g, dtype=torch.float64)
        try:
            want = F.conv_transpose2d(x, w, b, stride, p, op, g)
        except RuntimeError:      # an output size below 1
            continue
        m = [max(math.ceil(k / st), math.ceil((k - pi + oi) / st)) for k, st, pi, oi in zip((kh, kw), stride, p, op)]
        y = F.conv2d(x, phase_weights(w, stride, m, g), b.repeat_interleave(stride[0] * stride[1]), 1,
                     [m[0] - 1, m[1] - 1], 1, g)
        n, _, hc, wc = y.shape
        y = y.reshape(n, ocg * g, stride[0], stride[1], hc, wc).permute(0, 1, 4, 2, 5, 3) \
            .reshape(n, ocg * g, hc * stride[0], wc * stride[1])
        y = y[:, :, p[0]:p[0] + want.shape[2], p[1]:p[1] + want.shape[3]]
        assert y.shape == want.shape and torch.allclose(y, want, atol=1e-9), (stride, kh, kw, g, p, op)
        done += 1


def test_unknown_ops_are_those_no_vkq_rule_names():
    """decompose_unknown_ops takes the ops torch.export can decompose that no vkq table names
    (aten.concat, arccos, special_erf, hstack, inner), never the ones vkq folds as they are
    (linear, layer_norm, the stack it rewrites itself, an in-place silu_: functionalize.py's);
    after it none is left."""
    from vkq.passes.decompose_unknown import decompose_unknown_ops, unknown_ops, vkq_op_names

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm = torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)

        def forward(self, x):
            h = self.norm(self.fc(x))
            return torch.concat([h, torch.arccos(h.tanh())], 1), torch.special.erf(h), torch.hstack([h, h]), \
                torch.inner(h, h), torch.stack([h, h]), F.silu(h * 2, inplace=True)

    assert {"linear", "layer_norm", "cat", "stack", "conv2d", "einsum"} <= vkq_op_names()
    ep = torch.export.export(M(), (torch.randn(3, 4),))
    names = {str(op).split(".")[1] for op in unknown_ops(ep.graph)}
    assert names == {"concat", "arccos", "special_erf", "hstack", "inner"}, names
    done = decompose_unknown_ops(ep)
    assert unknown_ops(done.graph) == []
    targets = {str(n.target) for n in done.graph.nodes if n.op == "call_function"}
    assert {"aten.linear.default", "aten.layer_norm.default", "aten.stack.default", "aten.cat.default",
            "aten.acos.default", "aten.erf.default"} <= targets, targets
    x = torch.randn(3, 4)
    for got, want in zip(done.module()(x), ep.module()(x)):
        torch.testing.assert_close(got, want)
