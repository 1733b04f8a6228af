"""Program rewrites that read concrete shapes: views folded into strided kernels.

Attention's head split and merge are reshape/permute copies around its matmuls; these rewrites
let the kernels read and write through strides instead, and drop the copies. The strides follow
from the shapes, so the rewrites run where shapes are concrete: lower() on a static program,
the executor on each shape of a dynamic one (the program file keeps the copies, and the
reference runs them — the same values). The folds of the float ops around attention's scores
(its scale and mask into the softmax, a q/dq pair into the kernel that produces the value) run
here with them, as they read what the view folds leave. Each rewrite takes (program, keep): the
names of nodes it must leave in place."""
from __future__ import annotations

from .ops.attention import fold_views_into_attention
from .ops.attention_cached import fold_head_transposes, pair_rotaries
from .ops.float_rewrites import fold_broadcast_expands, fold_fake_quantize, fold_scale_mask_into_softmax, fold_views_into_matmul
from .ops.cat_q8 import fold_cat_prefixes
from .ops.linear_parts import group_row_linears, pair_glu_linears
from .ops.shape import fold_view_chains
from .program import NodeError

SHAPE_REWRITES = [
    fold_broadcast_expands,          # x / n.expand_as(x): the division broadcasts n itself
    fold_views_into_matmul,          # attention's head split/merge copies -> strided matmuls
    fold_scale_mask_into_softmax,    # softmax(scores * s + mask) in one pass
    fold_views_into_attention,       # q, k, v read from the projection, the result written merged
    fold_head_transposes,            # a cached decoder's head split / merge read and written through
    pair_rotaries,                   # its q's and k's rotations in one dispatch; after the fold (same attrs)
    fold_fake_quantize,              # a float result's q/dq pair in its kernel's stores; last: the
                                     #   folds above take only ops without one
    fold_view_chains,                # int8 gathers in a row -> one gather by the composed map
    fold_cat_prefixes,               # a copying cat of an earlier cat's inputs and more: that cat's output and the rest
    group_row_linears,               # the linears that read one x (q, k, v) as one node: one dispatch on CPU drivers
    pair_glu_linears,                # an MLP's gate and up likewise
]


def rewrite_for_shapes(program, keep=frozenset()):
    """Apply every shape rewrite to a concrete program, in place; returns it. keep: names of
    nodes no rewrite may fold away. A dynamic program's executor plans its memory for the
    rewrites at the upper bounds and passes the nodes left there: at a smaller shape (a batch
    of 1 makes more views strided reads) the rewrites then fold the same views, not more."""
    for rewrite in SHAPE_REWRITES:
        try:
            rewrite(program, keep)
        except (TypeError, KeyError, IndexError, AttributeError, OverflowError, ZeroDivisionError) as e:
            raise NodeError(f"the program's nodes do not fit the shape rewrite {rewrite.__name__} "
                            f"({type(e).__name__}: {e})") from e
    return program
