"""decompose_ops: ATen ops that no kernel runs as they are, rewritten into the few ops ATen
itself computes them with, each of which has a kernel. It runs after fold_qdq_patterns: an op
between a dequantize and a quantize has become an int8 op there (selu, threshold, frac, ... a
lookup table), so only what is left in float is rewritten here:

  aten.max.dim / min.dim (values, indices) + getitems -> amax / amin and argmax / argmin
  aten.one_hot(ids, n)                          -> eq(unsqueeze(ids, -1), arange(n)) as int64
  aten.scatter(x, dim, index, value), one index along dim (a one-hot of an argmax)
                                                -> where(index == arange along dim, value, x)
  aten.clamp.Tensor(x, min, max) (tensor bounds) -> minimum(maximum(x, min), max)
  clamp / hardtanh / relu of an integer tensor (ids clamped into a table) -> maximum / minimum
                                                  by 0-d constants (int32 word ops)
  float threshold, hardshrink, softshrink, selu, celu, rrelu (eval), log_sigmoid, heaviside, frac,
  isnan, nan_to_num, lerp, addcdiv, var_mean / std_mean, diff (n = 1; prepend / append: a cat), sinc,
  xlogy, count_nonzero (a sum of x != 0), bucketize by constant boundaries (counts of comparisons),
  sgn, deg2rad / rad2deg, nansum, logaddexp(2)
  aten.prod(x[, dim, keepdim]), float          -> select(cumprod(x, dim), dim, -1) (flattened: over all)
  aten.aminmax(x, dim, keepdim) + getitems     -> amin, amax
  aten.histc(x, bins, min, max), float, min < max -> sums of comparisons with ATen's bin edges
  aten.cumsum(x, dim, dtype=int32/int64) of a float x -> cumsum of x cast to dtype (torch's order)
  aten.sum(x[, dim]) of an integer x            -> the last of cumsum(x, dim) (integer additions)
  aten.kthvalue(x, k, dim) / median(x[, dim]) + getitems -> the (k-1)-th / middle of a stable argsort
                                                  and the values gathered by it (median NaN where
                                                  its row holds one, as torch's; nanmedian the
                                                  middle of the row's numbers)
  round(x, decimals), logit(x, eps), fmax / fmin, ldexp, logical and / or / xor of non-bools
                                                -> ATen's formulas (mul / round / div; clamp, div,
                                                  log; where of NaN tests; mul by pow(2, e); != 0)
  masked_scatter(x, mask, source)              -> where(mask, source flattened indexed by the mask's
                                                  running count - 1, x) (a VLM's image features into
                                                  its token embeddings)
  signbit(x)                                    -> x < 0; a float 0 by the sign of 1 / x
  linalg_vector_norm(x, ord != 2), dist(x, y, p) -> sum / amax / amin / count of |x|, or sum(|x|^p)^(1/p)
  real / imag / abs of fft, fft2, fftn, rfft, rfft2, rfftn of a real tensor (FNet's token mixing),
  or view_as_real of one (and its selects)     -> products with constant cos / sin tables, dim by dim;
                                                  along a dynamic dim tables the graph computes
                                                  (those rules: decompose_fourier.py)
                                                -> where, compares, elu, softplus, trunc, ... as ATen
                                                  computes them (its comparisons: a NaN stays NaN)
  aten.topk(x, k <= 8, dim, largest) + getitems -> k rounds of argmax, gather and a where; a larger k
                                                  (or a dynamic dim): the first k of a stable argsort
  aten.sort(x, dim, descending) + getitems     -> argsort (stable) and a gather of the values by it
  aten.meshgrid(1-D tensors, indexing) + getitems -> each a view along its dim, expanded (a grid of
                                                  aranges of dynamic lengths: static ones fold)
  cosine_similarity, pairwise_distance (p = 2) -> norms, divisions, a sum (ATen's formulas)
  cdist (p = 2)                                 -> ATen's: a matmul of padded operands (> 25 rows), else
                                                  the norms of the differences
  any / all (a max / min of 0/1 floats), the sum of a bool tensor (of 0/1 floats, as int64)
  add / sub / mul / div / maximum / minimum of a float and an integer tensor, the true division
  of integers                                   -> the integer ones cast first (torch's type promotion)
  aten.logsumexp(x, dims, keepdim), float, static shapes
                                                -> m + log(sum(exp(x - m))), m = amax (0 where infinite), as ATen
  aten.bilinear(x1, x2, w, b) (nn.Bilinear), float -> x1 (outer) x2 flattened @ (w as (O, I*J))^T + b
  aten.affine_grid_generator(theta, [N, C, H, W], align_corners), static size (a spatial transformer)
                                                -> bmm(base grid (N, H*W, 3), theta^T) viewed (N, H, W, 2):
                                                  ATen's own computation, the base grid a constant
  aten.var / aten.std (dim or correction form), float, static shapes
                                                -> sum((x - mean(x))^2) / (n - correction) [sqrt]: float ops
                                                  with kernels (a hand-written layer norm's x.std(-1))

Rules are the table DECOMPOSE: target -> function(node) returning the replacement node or None
(the node stays, and runs on the CPU if nothing else takes it). The rules themselves are in
modules by topic (this one holds the table and the pass): decompose_pointwise.py (elementwise
formulas, clamps, mixed operands), decompose_reductions.py (reductions, statistics and the other
ops along a dim), decompose_indexing.py (sorts, selections, one-hot / scatter, meshgrid),
decompose_products.py (similarities, distances, bilinear, affine grids), decompose_fourier.py.
"""
from __future__ import annotations

from torch.fx import GraphModule

from ._graph import aten, finish
from .decompose_fourier import complex_abs_or_float, dft_from_fft
from .decompose_indexing import (eq_from_one_hot, expands_from_meshgrid, gather_from_sort, index_from_masked_scatter,
                                 select_from_kthvalue, selections_from_topk, where_from_scatter)
from .decompose_pointwise import (compares_from_signbit, elu_from_celu_selu, extremes_from_clamp,
                                  extremes_from_int_clamp, from_addcdiv, from_lerp, from_logaddexp, from_logit,
                                  from_round_decimals, from_sinc, from_xlogy, leaky_relu_from_rrelu, mul_from_angle,
                                  mul_from_ldexp, ne_from_isnan, on_bools_from_logical, promote_mixed_operands,
                                  sign_from_sgn, softplus_from_log_sigmoid, sub_from_frac, where_from_fmax,
                                  where_from_heaviside, where_from_nan_to_num, where_from_shrink, where_from_threshold)
from .decompose_products import (bmm_from_affine_grid, from_cdist, from_cosine_similarity, linear_from_bilinear,
                                 norm_from_pairwise_distance)
from .decompose_reductions import (cast_before_cumsum, count_or_int_sum, counts_from_bucketize, counts_from_histc,
                                   extremes_from_aminmax, from_any_all_count, from_logsumexp, last_from_int_sum,
                                   last_from_prod, moments_from_var, moments_from_var_mean, reductions_from_max_dim,
                                   sub_from_diff, sum_from_count_nonzero, sum_from_nansum, sums_from_vector_norm)


DECOMPOSE = {
    **{t: moments_from_var for t in (aten.var.dim, aten.std.dim, aten.var.correction, aten.std.correction)},
    **{t: moments_from_var_mean for t in (aten.var_mean.correction, aten.var_mean.dim, aten.std_mean.correction,
                                          aten.std_mean.dim)},
    aten.logsumexp.default: from_logsumexp,
    aten.affine_grid_generator.default: bmm_from_affine_grid,
    aten.bilinear.default: linear_from_bilinear,
    aten.max.dim: reductions_from_max_dim, aten.min.dim: reductions_from_max_dim,
    aten.one_hot.default: eq_from_one_hot,
    aten.scatter.value: where_from_scatter,
    aten.clamp.Tensor: extremes_from_clamp,
    **{t: extremes_from_int_clamp for t in (aten.hardtanh.default, aten.clamp.default, aten.clamp_min.default,
                                            aten.clamp_max.default, aten.relu.default)},
    aten.threshold.default: where_from_threshold,
    aten.hardshrink.default: where_from_shrink, aten.softshrink.default: where_from_shrink,
    aten.selu.default: elu_from_celu_selu, aten.celu.default: elu_from_celu_selu,
    aten.rrelu.default: leaky_relu_from_rrelu,
    aten.log_sigmoid.default: softplus_from_log_sigmoid,
    aten.heaviside.default: where_from_heaviside,
    aten.frac.default: sub_from_frac,
    aten.sgn.default: sign_from_sgn,
    aten.deg2rad.default: mul_from_angle, aten.rad2deg.default: mul_from_angle,
    aten.nansum.default: sum_from_nansum,
    aten.prod.default: last_from_prod, aten.prod.dim_int: last_from_prod,
    aten.aminmax.default: extremes_from_aminmax,
    aten.histc.default: counts_from_histc,
    aten.cumsum.default: cast_before_cumsum,
    aten.logaddexp.default: from_logaddexp, aten.logaddexp2.default: from_logaddexp,
    aten.sinc.default: from_sinc,
    aten.xlogy.Tensor: from_xlogy,
    aten.count_nonzero.dim_IntList: sum_from_count_nonzero, aten.count_nonzero.default: sum_from_count_nonzero,
    aten.bucketize.Tensor: counts_from_bucketize,
    aten.isnan.default: ne_from_isnan,
    aten.nan_to_num.default: where_from_nan_to_num,
    aten.lerp.Scalar: from_lerp, aten.lerp.Tensor: from_lerp,
    aten.addcdiv.default: from_addcdiv,
    aten.diff.default: sub_from_diff,
    **{getattr(aten, b).Tensor: promote_mixed_operands for b in ("add", "sub", "mul", "div")},
    aten.div.Scalar: promote_mixed_operands,
    aten.maximum.default: promote_mixed_operands, aten.minimum.default: promote_mixed_operands,
    aten.topk.default: selections_from_topk,
    aten.sort.default: gather_from_sort, aten.sort.stable: gather_from_sort,
    aten.meshgrid.default: expands_from_meshgrid, aten.meshgrid.indexing: expands_from_meshgrid,
    aten.cosine_similarity.default: from_cosine_similarity,
    aten.pairwise_distance.default: norm_from_pairwise_distance,
    aten.cdist.default: from_cdist,
    **{t: from_any_all_count for t in (aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims,
                                       aten.all.default)},
    aten.sum.dim_IntList: count_or_int_sum, aten.sum.default: last_from_int_sum,
    aten.round.decimals: from_round_decimals,
    aten.logit.default: from_logit,
    aten.fmax.default: where_from_fmax, aten.fmin.default: where_from_fmax,
    aten.ldexp.Tensor: mul_from_ldexp,
    **{t: on_bools_from_logical for t in (aten.logical_and.default, aten.logical_or.default, aten.logical_xor.default)},
    aten.kthvalue.default: select_from_kthvalue, aten.median.dim: select_from_kthvalue,
    aten.median.default: select_from_kthvalue, aten.nanmedian.dim: select_from_kthvalue,
    aten.nanmedian.default: select_from_kthvalue,
    aten.masked_scatter.default: index_from_masked_scatter,
    aten.signbit.default: compares_from_signbit,
    aten.linalg_vector_norm.default: sums_from_vector_norm, aten.dist.default: sums_from_vector_norm,
    aten.real.default: dft_from_fft, aten.imag.default: dft_from_fft, aten.abs.default: complex_abs_or_float,
    aten.select.int: dft_from_fft,          # (select(view_as_real(fft), -1, 0): real in a decomposed export)
    aten.view_as_real.default: dft_from_fft,
}


def decompose_ops(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        rule = DECOMPOSE.get(node.target) if node.op == "call_function" else None
        new = rule(node) if rule is not None else None
        if new is not None:
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)
            changed = True
    return finish(gm, changed)
