"""The lowering passes, in order. Each is a function GraphModule -> bool (changed?); run_pipeline
runs them in this order with a graph lint after each. Order matters where a comment says why.
(Before quantization, right after torch.export, decompose_unknown_ops replaces the ops that no
vkq rule names by torch.export's own decompositions of them (api.exported_for_quantization);
then VkqQuantizer.transform_for_annotation rewrites the float graph so that
its annotators see the forms these passes fold: normalize_for_annotation, batch_norm_as_conv,
unroll_rnn, three_d_as_two_d, one_d_as_two_d, conv_transpose_as_conv; under the linear-only schemes
patch_conv_as_linear.)"""
from __future__ import annotations

import time

from torch.fx import GraphModule

from ..progress import named_steps
from ._graph import lint
from .assign_layouts import assign_layouts
from .drop_cancelling_qdq import drop_cancelling_qdq
from .decompose_ops import decompose_ops
from .drop_guards import drop_guards
from .fake_quantize import fake_quantize
from .fold_constants import fold_constant_computations, fold_constants
from .fold_qdq_patterns import fold_qdq_patterns
from .fuse_activation import fuse_activation
from .fuse_kv_write import fuse_kv_write
from .inline_wrappers import inline_wrappers
from .int8_embeddings import int8_embeddings
from .fuse_epilogue import fuse_epilogue
from .fuse_float_epilogue import fuse_float_epilogue, fuse_rms_norm
from .lift_quantize import lift_quantize
from .normalize_ops import normalize_ops
from .permute_in_float import permute_in_float
from .unroll_rnn import unroll_rnn
from .views_to_repack import views_to_repack

PIPELINE = [
    inline_wrappers,        # no_grad / autocast(enabled=False) blocks: their nodes, not a submodule call
    drop_guards,            # export's _guards_fn input checks: nothing to run
    unroll_rnn,             # LSTM / GRU / RNN over a static length -> their cells' ops (a graph
                            #   converted without vkq's quantizer still has them); before normalize_ops
    normalize_ops,          # one spelling per op (convolution -> conv2d, t + addmm -> linear, ...)
    fuse_kv_write,          # an int8 KV cache's index_copy of kv_quantize's rows -> index_copy_q8 (one dispatch)
    fold_constant_computations,  # computations on constants only (a position-bias MLP) -> their values,
                            #   as PT2E computes them; their q/dq and a weight's views stay for folding
    fuse_activation,        # relu/relu6/hardtanh before quantizes -> their qmin/qmax; before folding,
                            #   so that dq -> conv -> q is adjacent
    lift_quantize,          # quantize above view chains, identical quantizes merged: dq -> pool -> q adjacent
    drop_cancelling_qdq,    # q(dq(x)) with equal params -> x: int8 stays int8 between ops
    fold_qdq_patterns,      # dq -> op -> q -> one vkq integer op (needs the three passes above)
    int8_embeddings,        # opt-in (lower's int8_embeddings): an embedding of a float table -> embedding_q8rows;
                            #   after fold_constant_computations, which made gathers by constant ids values
    decompose_ops,          # float ops no kernel runs -> the few ATen computes them with (var, lerp,
                            #   max.dim, ...); after folding, so that an int8 selu or threshold stays
                            #   one lookup table
    fuse_epilogue,          # a residual add_q8 into the conv2d_q8 whose output only it reads; on the
                            #   vkq ops, so after folding, and before assign_layouts (4W4C residual)
    fuse_float_epilogue,    # a silu / residual add / product after a linear_dynamic into its epilogue
    fuse_rms_norm,          # an rms_norm read by linear_dynamics only into their row quantization; after
                            #   fuse_float_epilogue (the norm's weight is the linears' last input)
    permute_in_float,       # int8 permutes / views beside a float matmul (attention's K transpose, head
                            #   merge) -> float ones, which the lowering folds into its strided reads/writes
    fake_quantize,          # dq(q(x)) of a float x read by nothing else -> one float pass (attention scores);
                            #   after permute_in_float, which moves dequantizes
    views_to_repack,        # views left on int8 -> repack(shape)
    fold_constants,         # leftover float work on constants (weights of CPU ops) done once
    assign_layouts,         # last: needs the final int8 ops to know who reads what
]


def run_pipeline(gm: GraphModule, passes=None, log=None, progress: str | None = None) -> dict:
    """Run the passes on gm in place; returns {pass name: (changed, seconds)}. progress: a bar
    of that title over the passes (vkq.progress)."""
    report = {}
    passes = PIPELINE if passes is None else passes
    for p in (named_steps(passes, progress, "pass", lambda p: p.__name__) if progress else passes):
        start = time.perf_counter()
        changed = p(gm)
        lint(gm)
        report[p.__name__] = (bool(changed), time.perf_counter() - start)
        if log:
            log(f"{p.__name__}: {'changed' if changed else 'no change'}")
    return report
