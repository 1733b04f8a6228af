"""Every vkq op, one module per family; importing this package registers them all.

The op contract (what the lowering emits and the executors run). Tensor names in a Node's
`inputs` are activations or constants; constants are arrays in Program.constants and are
listed as inputs so that they live in the weights file. Attrs are plain JSON values.
int8 tensors are logical int8 arrays to the references; on the device they are Int8x4
packed in their TensorSpec.layout. Requantization is vkq.quant.requantize everywhere.

  quantize            x f32 -> q int8           attrs scale, zero_point[, qmin, qmax]
  dequantize          q int8 -> x f32           attrs scale, zero_point
  repack              q int8 -> q int8          (layout change and/or row-major reshape; same numel)
  reshape, permute, transpose, expand, cat, slice, select, split, unbind, constant_pad_nd, take
                      any dtype -> the same dtype: values moved, not changed (vkq/ops/shape.py)
  eq/ne/lt/le/gt/ge, bitwise_and/or/xor, logical_not, cast, where, embedding, gather   ids and masks (logic.py)
  embedding_q8rows    ids int32 (*S), table int8 (V, H) constant, scale f32 (V,) constant -> f32 (*S, H)
                      out[..., :] = f32(table[id, :]) * scale[id]; an id outside [0, V) raises in the
                      reference, is clamped by the kernel (embedding_q8.py)
  full, arange        () -> f32/int32/bool of a shape known at run time; tril, triu  x -> x  (creation.py)
  cumsum              x int32/f32 -> int32/f32 along a dim; attrs dim, dtype (scan.py)
  argmax, argmin      x int32/f32 -> int32 indices along a dim or over all; attrs dim, keepdim (scan.py)
  upsample_bilinear2d x f32 or int8 (N, C, H, W) -> same (N, C, Ho, Wo); attrs out_size, align_corners, scales
  scaled_dot_product_attention   q, k, v f32 [, mask f32/int32] -> f32; attrs scale, causal, mask_kind
  rotary              x f32 (B, H, T, D), cos, sin f32 (B|1, T, D) -> f32: x*cos + rotate_half(x)*sin
  attention_cached    q f32 (B, H, T, D), k_cache f32 (B, Hkv, N, D), v_cache f32 (B, Hkv, N, Dv), positions int32 (T,)
                      -> f32 (B, H, T, Dv); attrs scale, window (0: none), softcap (0.0: none): query t attends to
                      cache rows lo..positions[t] (a window: lo = p - window + 1), head h to cache head h // (H // Hkv)
  kv_quantize         x f32 (..., D) -> int32 (..., ceil(D/4) + 1): each row int8 Int8x4 and its float32 scale
                      (symmetric, amax / 127), the int8 KV cache's rows (kv_q8.py)
  index_copy_q8       x int32 (..., size, W + 1), index int32 (k,), src f32 (..., k, D) -> int32: x with rows
                      index[j] = kv_quantize(src)'s row j; attrs dim (rank - 2); in place into a state (kv_q8.py)
  attention_cached_q8 attention_cached over int8 caches of kv_quantize's rows (B, Hkv, N, ceil(D/4) + 1);
                      attrs scale, window, softcap, dv
  linear_q8           x int8 4H4W (..., K), weight int8 (N, K), bias float64 or int32 (N,),
                      multiplier int32 (N,), shift int32 (N,) -> int8 4H4W (..., N)
                      attrs x_zp, out_zp, qmin, qmax (qmin/qmax carry a fused relu/relu6/clamp)
                      acc = (x - x_zp) @ weight.T + B
                      out = requantize(acc, multiplier, shift, out_zp, qmin, qmax, frac)
                      with (B, frac) = vkq.quant.split_bias(bias, multiplier): the bias at the accumulator's
                      scale keeps its fraction (float64; an int32 bias has none)
  linear_q8_fout      x int8 4H4W (..., K), weight int8 (N, K), bias f32 (N,), scale f32 (N,) -> f32 (..., N)
                      attrs x_zp;  out = f32(acc_without_bias) * scale + bias  (scale = x_scale * w_scale[n])
  linear_dynamic      x f32 (..., K), weight int8 (N, K), w_scale f32 (N,), bias f32 (N,) -> f32 (..., N)
                      per-row int8 quantization of x on the device, int8 GEMM, float out
  linear_dynamic_parts  x f32, then weight, w_scale, bias of each of 2-3 parts -> an output a part
                      (the linear_dynamic nodes reading one x: a layer's q, k, v; linear_parts.py)
  linear_weight_only  x f32 (..., K), weight int8 (N, K), w_scale f32 (N,), bias f32 (N,) -> f32 (..., N)
  linear_int4         x f32 (..., K), qweight int32 (N, ng*G/8), scale f32 (N, ng), zero int32 (N, ng),
                      bias f32 (N,) [, offset f32 (N, ng)] -> f32 (..., N); attrs group_size
                      int4 group-wise weights (vkq/int4.py), float activations (linear_int4.py)
  linear_8da4w        the same inputs and attrs: x quantized per row to int8 on the device
                      (as linear_dynamic), int8 x int4 sums exact per group, group scales in float
  conv2d_q8           x int8 4W4C (N, C, H, W), weight int8 (OC, C/groups, KH, KW), bias float64/int32 (OC,),
                      multiplier int32 (OC,), shift int32 (OC,) -> int8 4W4C (N, OC, OH, OW)
                      attrs stride [2], padding [2], dilation [2], groups, x_zp, out_zp, qmin, qmax
                      spatial padding contributes 0 to acc (the padded value is x_zp)
  add_q8, mul_q8      a int8, b int8 (same shape and layout) -> int8; attrs from the op module's params helper
  clamp_q8            q int8 -> int8 (standalone relu/relu6/hardtanh)
  max_pool2d_q8, avg_pool2d_q8, adaptive_avg_pool2d_q8, adaptive_max_pool2d_q8, max_unpool2d_q8, cat_q8   (see their modules)

Each op module also exports a `*_params` helper that turns float scales (and a float bias) into
the integer constants/attrs above, used by the lowering and by tests alike.
"""
from . import io, linear, linear_parts, linear_int4, conv, eltwise, pool, unpool, cat_q8, lut, cpu, float, float_norm, float_matmul, shape, attention, attention_cached, kv_q8, rotary, logic, creation, resize, scan, embedding_q8  # noqa: F401
