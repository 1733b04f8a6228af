"""decompose_products: decompose_ops' rules for products and distances, as ATen computes them
on ops that have kernels: cosine_similarity, pairwise_distance (p = 2), cdist (p = 2: a matmul of
padded operands, or the norms of the differences), bilinear (an outer product and a matmul),
affine_grid_generator (a bmm by its constant base grid). A module of its own so that
decompose_ops.py stays the table and the pass (it had grown past 800 lines);
decompose_ops.DECOMPOSE holds these rules with the others.
"""
from __future__ import annotations

import torch

from ._graph import _made, arg, aten, call_before, dynamic_size, val
from .decompose_pointwise import _float_in


def from_cosine_similarity(node):
    """cosine_similarity(x1, x2, dim, eps) as ATen computes it: each operand divided by its 2-norm
    along dim (clamped to eps), the products summed (operands of one shape; broadcasting ones,
    whose norms ATen takes after expanding, stay)."""
    x1, x2 = node.args[:2]
    dim, eps = int(arg(node, 2, "dim", 1)), float(arg(node, 3, "eps", 1e-8))
    v1, v2 = val(x1), val(x2)
    if not _float_in(node) or not isinstance(v2, torch.Tensor) or [str(d) for d in v1.shape] != [str(d) for d in v2.shape]:
        return None
    unit = []
    for x in (x1, x2):
        norm = call_before(node, aten.clamp_min.default, (call_before(node, aten.linalg_vector_norm.default, (x, 2, [dim], True)), eps))
        unit.append(call_before(node, aten.div.Tensor, (x, norm)))
    prod = call_before(node, aten.mul.Tensor, tuple(unit))
    return call_before(node, aten.sum.dim_IntList, (prod, [dim]))


def norm_from_pairwise_distance(node):
    """pairwise_distance(x1, x2, p, eps, keepdim) = ||x1 - x2 + eps||_p over the last dim (ATen's
    formula), p = 2."""
    x1, x2 = node.args[:2]
    p, eps, keepdim = float(arg(node, 2, "p", 2.0)), float(arg(node, 3, "eps", 1e-6)), bool(arg(node, 4, "keepdim", False))
    v = val(x1)
    if p != 2 or not _float_in(node) or not isinstance(v, torch.Tensor) or v.dim() == 0:
        return None
    diff = call_before(node, aten.sub.Tensor, (x1, x2))
    shifted = call_before(node, aten.add.Tensor, (diff, eps))
    return call_before(node, aten.linalg_vector_norm.default, (shifted, 2, [-1], keepdim))


def from_cdist(node):
    """cdist(x1, x2, p=2) (prototypical networks, point-cloud neighbours) as ATen computes it:
    with more than 25 rows on either side (or compute_mode "use_mm_for_euclid_dist": 1) its
    _euclidean_dist, cat([-2 x1, |x1|^2, 1]) @ cat([x2, 1, |x2|^2])^T, clamped to 1e-30, sqrt;
    else the norm of each difference, ||x1_i - x2_j|| over the last dim."""
    x1, x2 = node.args[:2]
    p, mode = float(arg(node, 2, "p", 2.0)), arg(node, 3, "compute_mode", None)
    v1, v2 = val(x1), val(x2)
    if p != 2 or not _float_in(node) or not isinstance(v2, torch.Tensor) or v1.dim() < 2 or v2.dim() < 2:
        return None
    rows = (v1.shape[-2], v2.shape[-2])
    if not all(isinstance(r, int) for r in rows) or dynamic_size(x1, [v1.dim() - 2]) or dynamic_size(x2, [v2.dim() - 2]):
        return None                     # (ATen's choice of formula reads the row counts)
    if mode not in (None, 0, 1, 2):     # (ATen's int: 0 if necessary, 1 always, 2 never)
        return None
    mm = mode == 1 or (mode in (None, 0) and max(rows) > 25)
    if not mm:
        diff = call_before(node, aten.sub.Tensor, (call_before(node, aten.unsqueeze.default, (x1, -2)),
                                                   call_before(node, aten.unsqueeze.default, (x2, -3))))
        return call_before(node, aten.linalg_vector_norm.default, (diff, 2, [-1], False))
    parts = []
    for x, first in ((x1, True), (x2, False)):
        norm = call_before(node, aten.sum.dim_IntList, (call_before(node, aten.pow.Tensor_Scalar, (x, 2)), [-1], True))
        ones = call_before(node, aten.ones_like.default, (norm,))
        lead = call_before(node, aten.mul.Tensor, (x, -2)) if first else x
        parts.append(call_before(node, aten.cat.default, ([lead, norm, ones] if first else [lead, ones, norm], -1)))
    prod = call_before(node, aten.matmul.default, (parts[0], call_before(node, aten.transpose.int, (parts[1], -1, -2))))
    return call_before(node, aten.sqrt.default, (call_before(node, aten.clamp_min.default, (prod, 1e-30)),))


def linear_from_bilinear(node):
    """nn.Bilinear: y[..., o] = sum_ij x1[..., i] w[o, i, j] x2[..., j] + b[o]: the outer product
    x1 (x) x2 flattened, times w viewed (O, I*J) transposed, plus b: a mul, a matmul and an add
    with kernels (ATen sums it through _trilinear; the same terms, another order)."""
    x1, x2, w = node.args[:3]
    b = arg(node, 3, "bias")
    v1, v2, vw = val(x1), val(x2), val(w)
    if not all(isinstance(v, torch.Tensor) and v.is_floating_point() for v in (v1, v2, vw)) \
            or not all(isinstance(d, int) for d in (*v1.shape, *v2.shape)) or v1.shape[:-1] != v2.shape[:-1]:
        return None
    lead, (o, i, j), f = list(v1.shape[:-1]), vw.shape, v1.dtype
    a = _made(node, aten.unsqueeze.default, (x1, -1), (*lead, i, 1), f)
    c = _made(node, aten.unsqueeze.default, (x2, -2), (*lead, 1, j), f)
    outer = _made(node, aten.reshape.default, (_made(node, aten.mul.Tensor, (a, c), (*lead, i, j), f), [*lead, i * j]),
                  (*lead, i * j), f)
    flat_w = _made(node, aten.reshape.default, (w, [o, i * j]), (o, i * j), vw.dtype)
    out = _made(node, aten.matmul.default, (outer, _made(node, aten.t.default, (flat_w,), (i * j, o), vw.dtype)),
                (*lead, o), f)      # (a matmul: the float linear has no kernel for float weights)
    return out if b is None else _made(node, aten.add.Tensor, (out, b), (*lead, o), f)


def bmm_from_affine_grid(node):
    """affine_grid_generator(theta (N, 2, 3), size (N, C, H, W), align_corners) as ATen computes
    it (AffineGridGenerator.cpp): its base grid (x, y, 1 at every position: linspace(-1, 1) per
    dim, scaled by (n - 1) / n without align_corners) times theta^T, a bmm; the base grid made
    here by ATen itself, a constant."""
    from ._graph import add_constant
    theta, size, align = node.args[0], node.args[1], bool(node.args[2])
    v = val(theta)
    if len(size) != 4 or not all(isinstance(d, int) for d in size) or not isinstance(v, torch.Tensor) \
            or not v.is_floating_point():
        return None
    n, _, h, w = size
    theta1 = torch.tensor([[[1.0, 0, 0], [0, 1, 0]]], dtype=v.dtype)   # ATen's base grid, read back
    base = torch.ops.aten.affine_grid_generator.default(theta1, [1, 1, h, w], align).reshape(1, h * w, 2)
    base = torch.cat([base, torch.ones(1, h * w, 1, dtype=v.dtype)], 2).expand(n, h * w, 3).contiguous()
    grid = add_constant(node.graph.owning_module, f"{node.name}_base", base, node)
    t = _made(node, aten.transpose.int, (theta, 1, 2), (n, 3, 2), v.dtype)
    out = _made(node, aten.bmm.default, (grid, t), (n, h * w, 2), v.dtype)
    return _made(node, aten.view.default, (out, [n, h, w, 2]), (n, h, w, 2), v.dtype)
