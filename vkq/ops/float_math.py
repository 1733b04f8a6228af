"""numpy twins of shaders/include/float_math.glsl and float_exact.glsl: the same float32
operations in the same order as the shaders, so that a kernel built on them and its reference give
the same bits (issue 59's rules: float_exact.glsl's header). numpy float32 + - * round once each;
nothing here uses np.sum, BLAS or float64."""
from __future__ import annotations

import functools

import numpy as np

F32 = np.float32


def _f(x):
    return np.asarray(x, dtype=F32)


def _any_shape(fn):
    """An elementwise twin taking 0-d inputs (a full reduction's result, a numpy scalar): run on
    them as 1-d, the result shaped back. The twins work on bits, and numpy 1.x computes a 0-d
    int32 array's `b >> 1` or `b & 0x7FFFFFFF` in int64 (a scalar operation), whose view as
    float32 fails; on arrays of 1 dimension or more they stay int32."""
    @functools.wraps(fn)
    def twin(*args):
        if not any(isinstance(a, (np.ndarray, np.generic)) and np.ndim(a) == 0 for a in args):
            return fn(*args)
        shape = np.broadcast_shapes(*(np.shape(a) for a in args if isinstance(a, (np.ndarray, np.generic))))
        lifted = [np.atleast_1d(a) if isinstance(a, (np.ndarray, np.generic)) else a for a in args]
        return np.asarray(fn(*lifted)).reshape(shape)
    return twin


_ERF_P = [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02]
_ERF_Q = [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02]


@_any_shape
def erf_f32(x):
    """The shaders' erf, bit for bit: x P(x^2) / Q(x^2) on x clamped to [-4, 4], the division as
    (x p) * recip_newton(-128 q) * -128 (float_math.glsl erf_f32), products flushed."""
    x = np.where(_f(x) < F32(-4), F32(-4), np.where(_f(x) > F32(4), F32(4), _f(x))).astype(F32)
    x2 = ftz(x * x)
    p, q = F32(_ERF_P[0]), F32(_ERF_Q[0])
    for c in _ERF_P[1:]:
        p = p * x2 + F32(c)
    for c in _ERF_Q[1:]:
        q = q * x2 + F32(c)
    r = recip_newton(q * F32(-128)) * F32(-128)
    return ftz(ftz(x * p) * r)


@_any_shape
def exp_f32(x):
    """The shaders' exp in float32 numpy: x = n ln2 + r (Cody-Waite), Cephes' polynomial, 2^n;
    inf and 0 past float32's range, subnormals through e^(x + 24 ln 2) 2^-24."""
    x = _f(x)
    sub = x < F32(-87.33654)
    y = np.clip(np.where(sub, x + F32(16.635532333), x), F32(-87.33654), F32(88.72283))
    n = np.rint(y * F32(1.44269504089))
    r = y - n * F32(0.693359375)
    r = r + n * F32(2.12194440e-4)
    p = F32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + F32(c)
    p = p * (r * r) + r + F32(1)
    with np.errstate(invalid="ignore"):          # (n of an inf or NaN: replaced below)
        v = np.ldexp(p, n.astype(np.int32)).astype(F32)
    v = np.where(sub, v * F32(2.0 ** -24), v)
    return np.where(x > F32(88.72283), F32(np.inf), np.where(x < F32(-103.972077), F32(0), v)).astype(F32)


@_any_shape
def ftz(v):
    """float_exact.glsl's ftz: v, or a zero of v's sign where v is subnormal."""
    v = _f(v)
    b = v.view(np.int32)
    return np.where((b & 0x7F800000) == 0, (b & np.int32(-0x80000000)).view(F32), v).astype(F32)


@_any_shape
def recip_newton(s):
    """float_exact.glsl's recip_newton: 1/s for float32 s in [1, 2^100] in float32 steps, a
    bit-pattern guess, two Newton steps and a third as a correction added, y + y (1 - s y)
    (every step normal on that range; past ~2^109 the correction is subnormal):
    1.21 ulp at most (linear.py's reciprocal, three plain steps for linear_rowq: 1.97)."""
    s = _f(s)
    y = (np.uint32(0x7EF311C7) - s.view(np.uint32)).view(F32)
    for _ in range(2):
        y = y * (F32(2) - s * y)
    return y + y * (F32(1) - s * y)


@_any_shape
def silu_f32(x):
    """float_math.glsl's silu_f32, bit for bit: x * recip_newton(1 + exp_f32(-x)) (s = 1 + e past
    2^64 as 2^-64 recip_newton(s 2^-64)), a zero of x's sign where x < -87 or |x| < 2^-124 (silu(-inf) = -0)."""
    x = _f(x)
    s = F32(1) + exp_f32(-x)
    k = np.where(s > F32(2.0 ** 64), F32(2.0 ** -64), F32(1))
    y = x * (recip_newton(s * k) * k)
    tiny = (x.view(np.int32) & 0x7FFFFFFF) < 0x01800000
    return np.where((x < F32(-87)) | tiny, (x.view(np.int32) & np.int32(-0x80000000)).view(F32), y).astype(F32)


NORM_PARTS = 64     # the canonical row sum's partials (16 vec4s; float_layer_norm.comp row_canon)


def sum_canonical(v):
    """float_exact.glsl's canonical row sum (float_layer_norm.comp row_canon), bit for bit, of
    v (rows, d): value j into partial j % 64, each partial summed in index order; partials
    4q..4q+3 summed (p0 + p1) + (p2 + p3) into S_q; then the halving tree over the 16 S_q
    (S_q + S_{q+8}, + 4, + 2, + 1); ftz after every add (a signed sum may pass through a
    subnormal, which a device may flush; for terms >= 0 it changes nothing). Every lane count
    and path computes exactly this."""
    v = _f(v)
    rows, d = v.shape
    m = max(1, -(-d // NORM_PARTS))
    terms = np.zeros((rows, m * NORM_PARTS), F32)
    terms[:, :d] = v
    terms = terms.reshape(rows, m, NORM_PARTS // 4, 4)
    acc = _partials(terms)
    s = ftz(ftz(acc[..., 0] + acc[..., 1]) + ftz(acc[..., 2] + acc[..., 3]))
    while s.shape[1] > 1:
        h = s.shape[1] // 2
        s = ftz(s[:, :h] + s[:, h:])
    return s[:, 0]



def _partials(terms):
    """The 64 partials of sum_canonical, terms (rows, rounds, 16, 4): each the sum of its terms
    in round order from +0, ftz after each add. Where no running partial is subnormal the ftz's
    change nothing, and numpy's accumulate (sequential, in index order: no pairwise summation)
    gives the same bits in one call; else round by round."""
    with np.errstate(invalid="ignore", over="ignore"):       # (inf - inf: NaN, as the shader's)
        run = np.add.accumulate(terms, axis=1, dtype=F32) + F32(0)   # (+ 0: from +0, a -0 adds +0)
    if run.size and np.any((np.abs(run) < F32(1.1754944e-38)) & (run != 0)):
        acc = np.zeros_like(terms[:, 0])
        for i in range(terms.shape[1]):
            acc = ftz(acc + terms[:, i])        # (from +0, as the shader: a -0 term adds +0)
        return acc
    return run[:, -1]

def sum_squares_canonical(x):
    """rms_norm's row sum of squares: sum_canonical of the squares, each ftz'd."""
    x = _f(x)
    return sum_canonical(ftz(x * x))


@_any_shape
def rsqrt_newton(t):
    """1 / sqrt(t) for float32 t > 0 (normal) to ~1 ulp in float32 steps alone: a bit-pattern
    seed, two Newton steps and a third written as a correction added to y (y + y (1/2 - t y^2 / 2)
    rather than y (3/2 - t y^2 / 2): 1.2 ulp at most instead of 2.1), as float_layer_norm.comp's
    rsqrt_newton (inversesqrt is 2 ulp at best, and not the same bits on two devices)."""
    t = np.asarray(t, F32)
    y = (np.int32(0x5F375A86) - (t.view(np.int32) >> 1)).view(F32)
    h = F32(0.5) * t
    for _ in range(2):
        y = y * (F32(1.5) - h * y * y)
    return y + y * (F32(0.5) - h * y * y)


def two_prod(a, b):
    """float_math.glsl's two_prod: (hi, lo) = a * b exactly (Dekker, Veltkamp's split by 4097)."""
    p = a * b
    ca = F32(4097) * a
    ah = ca - (ca - a)
    al = a - ah
    cb = F32(4097) * b
    bh = cb - (cb - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _sqrt_scaled(x):
    b = x.view(np.int32)
    a = b & 0x7FFFFFFF
    sub, small, big = (b & 0x7F800000) == 0, a < 0x21800000, a >= 0x71800000
    t = np.where(sub, (b & 0x7FFFFF).astype(F32) * F32(2.0 ** 49),
                 np.where(small, x * F32(2.0 ** 100), np.where(big, x * F32(2.0 ** -100), x))).astype(F32)
    sc = np.where(sub, F32(2.0 ** -99), np.where(small, F32(2.0 ** -50), np.where(big, F32(2.0 ** 50), F32(1))))
    sr = np.where(sub, F32(2.0 ** 99), np.where(small, F32(2.0 ** 50), np.where(big, F32(2.0 ** -50), F32(1))))
    return b, t, sc.astype(F32), sr.astype(F32)


@_any_shape
def sqrt_f32(x):
    """float_math.glsl's sqrt_f32, bit for bit: y = t rsqrt_newton(t), y + ((t - hi) - lo) r / 2 with
    (hi, lo) = y^2 exactly, on t = x scaled into [2^-60, 2^100) (a subnormal by integers): correctly
    rounded (np.sqrt's bits: tests/test_exact_float.py); sqrt(+-0) = +-0, x < 0 NaN."""
    with np.errstate(all="ignore"):
        x = _f(x)
        b, t, sc, _ = _sqrt_scaled(x)
        r = rsqrt_newton(t)
        y = t * r
        hi, lo = two_prod(y, y)
        s = (y + ((t - hi) - lo) * (F32(0.5) * r)) * sc
        s = np.where((b & 0x7F800000) == 0x7F800000, x, s)
        s = np.where(b < 0, F32(np.nan), s)
        return np.where((b & 0x7FFFFFFF) == 0, x, s).astype(F32)


@_any_shape
def rsqrt_f32(x):
    """float_math.glsl's rsqrt_f32, bit for bit: rsqrt_newton on sqrt_f32's scaled t (1.2 ulp);
    rsqrt(+-0) = +-inf, x < 0 NaN, rsqrt(inf) = 0."""
    with np.errstate(all="ignore"):
        x = _f(x)
        b, t, _, sr = _sqrt_scaled(x)
        s = rsqrt_newton(t) * sr
        s = np.where((b & 0x7F800000) == 0x7F800000, np.where(np.isnan(x), x, F32(0)), s)
        s = np.where(b < 0, F32(np.nan), s)
        return np.where((b & 0x7FFFFFFF) == 0, np.where(b < 0, F32(-np.inf), F32(np.inf)), s).astype(F32)


@_any_shape
def div6_f32(a):
    """float_math.glsl's div6_f32: a / 6 correctly rounded (numpy's division gives the same bits as
    its q + remainder / 6 steps: tests/test_exact_float.py), |a| past [2^-60, 2^100] scaled by
    2^+-64 around it, the result flushed; +-0, inf, NaN kept."""
    with np.errstate(all="ignore"):
        a = _f(a)
        b = a.view(np.int32) & 0x7FFFFFFF
        big, small = b > 0x71800000, b < 0x21800000      # (2^100, 2^-60)
        a2 = np.where(big, a * F32(2.0 ** -64), np.where(small, a * F32(2.0 ** 64), a)).astype(F32)
        k = np.where(big, F32(2.0 ** 64), np.where(small, F32(2.0 ** -64), F32(1)))
        q = ftz((a2 / F32(6)) * k)
        return np.where((b == 0) | (b >= 0x7F800000), a, q).astype(F32)


def div6_steps(a):
    """div6_core's float32 steps (float_math.glsl), for the test that numpy's a / 6 gives their bits."""
    q = a * F32(1 / 6)
    hi, lo = two_prod(q, np.full_like(q, F32(6)))
    return q + ((a - hi) - lo) * F32(1 / 6)


_LOG_P = (-1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
          2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
_NINF, _NAN = F32(-np.inf), F32(np.nan)


def _log_reduce(b):
    """float_math.glsl's log_reduce of bits b (x > 0 finite, a subnormal normalized by integers):
    (f, e) with x = (1 + f) 2^e, 1 + f in [sqrt(1/2), sqrt 2), f exact."""
    b = np.asarray(b, np.int32)
    m = b & 0x7FFFFF
    p = np.frexp(m.astype(np.float64))[1].astype(np.int32) - 1          # findMSB (-1 for 0)
    sub = (b & 0x7F800000) == 0
    mb = np.where(sub, (m << (23 - p).clip(0, 31)) & 0x7FFFFF, m).astype(np.int32)
    low = mb < 0x3504F3
    e = np.where(sub, p - 149, ((b >> 23) & 0xFF) - 127) + np.where(low, 0, 1)
    f = (mb | np.where(low, 0x3F800000, 0x3F000000)).astype(np.int32).view(F32) - F32(1)
    return f.astype(F32), e.astype(np.int32)


def _log_sum(f, e, c):
    """float_math.glsl's log_sum: log(1 + f) + e ln 2 + c (Cephes' logf)."""
    z = f * f
    fe = e.astype(F32)
    y = np.full_like(f, F32(7.0376836292e-2))
    for k in _LOG_P:
        y = y * f + F32(k)
    y = (y * f) * z
    y = y + F32(-2.12194440e-4) * fe
    y = y + F32(-0.5) * z
    y = y + c
    return ((f + y) + F32(0.693359375) * fe).astype(F32)


def _log_special(x, b, r):
    return np.where((b & 0x7FFFFFFF) == 0, _NINF, np.where(b < 0, _NAN,
                    np.where((b & 0x7F800000) == 0x7F800000, x, r))).astype(F32)


@_any_shape
def log_f32(x):
    """float_math.glsl's log_f32 (Cephes' logf), bit for bit: x = (1 + f) 2^e by its bits (a
    subnormal normalized by integers), log(1 + f) by the degree-9 polynomial, e ln 2 added in two
    parts; log(+-0) = -inf, x < 0 or NaN NaN, log(inf) = inf."""
    with np.errstate(all="ignore"):       # (inf, NaN and x <= 0: replaced at the end)
        return _log_f32(_f(x))


def _log_f32(x):
    b = x.view(np.int32)
    f, e = _log_reduce(b)
    return _log_special(x, b, _log_sum(f, e, F32(0)))


@_any_shape
def log2_f32(x):
    """float_math.glsl's log2_f32: e + log(1 + f) / ln 2 (exact at powers of two)."""
    with np.errstate(all="ignore"):
        x = _f(x)
        b = x.view(np.int32)
        f, e = _log_reduce(b)
        r = e.astype(F32) + _log_sum(f, np.zeros_like(e), F32(0)) * F32(1.44269504089)
        return _log_special(x, b, r)


@_any_shape
def log10_f32(x):
    """float_math.glsl's log10_f32: log_f32(x) log10(e)."""
    return (log_f32(x) * F32(0.43429448190325176)).astype(F32)


@_any_shape
def log1p_f32(x):
    """float_math.glsl's log1p_f32, bit for bit: u = 1 + x split as log_f32's, plus c / u, c what
    rounding 1 + x dropped (exact), 1 / u = 2^-e recip_newton(2 (1 + f)) 2; |x| < 2^-25: x."""
    with np.errstate(all="ignore"):
        x = _f(x)
        b = x.view(np.int32)
        u = F32(1) + x
        c = np.where(u < F32(2), x - (u - F32(1)), F32(1) - (u - x)).astype(F32)
        f, e = _log_reduce(u.view(np.int32))
        s = ((127 - np.minimum(e, 100)) << 23).astype(np.int32).view(F32)
        k = np.where(u < F32(16777216.0), c, F32(0)).astype(F32) * s
        corr = k * (recip_newton(F32(2) + (f + f)) * F32(2))
        r = _log_sum(f, e, corr)
        r = np.where(x == np.inf, x, r)
        r = np.where(~(x > F32(-1)), _NAN, r)
        r = np.where(x == F32(-1), _NINF, r)
        return np.where((b & 0x7FFFFFFF) < 0x33000000, x, r).astype(F32)


@_any_shape
def expm1_f32(x):
    """float_math.glsl's expm1_f32, bit for bit: Kahan's (u - 1) x / log(u), u = exp_f32(x), x / log(u)
    as |x| recip_newton(2^26 |log u|) 2^26; u = 1: x, u - 1 = -1: -1, u inf or x NaN: u."""
    with np.errstate(all="ignore"):
        x = _f(x)
        u = exp_f32(x)
        um1 = u - F32(1)
        l = log_f32(u)
        q = np.abs(x) * (recip_newton(np.abs(l) * F32(67108864.0)) * F32(67108864.0))
        r = um1 * q
        r = np.where(np.isinf(u) | np.isnan(x), u, r)
        r = np.where(um1 == F32(-1), F32(-1), r)
        return np.where(u == F32(1), x, r).astype(F32)


@_any_shape
def exp2_f32(x):
    """float_math.glsl's exp2_f32, bit for bit: 2^n exp_f32((x - n) ln 2), n = round(x); below
    2^-126 flushed (0 from x = -127), inf from 128, NaN NaN."""
    with np.errstate(all="ignore"):
        x = _f(x)
        xc = np.where(x < F32(-127), F32(-127), x)
        xc = np.where(xc > F32(128), F32(128), xc).astype(F32)
        n = np.rint(xc)
        v = exp_f32((xc - n) * F32(0.693147180559945))
        small = n < F32(-125)
        ni = np.where(np.isnan(n), 0, n).astype(np.int32) + np.where(small, 24, 0)
        w = np.ldexp(v, ni).astype(F32) * np.where(small, F32(2.0 ** -24), F32(1))
        r = np.where(x < F32(-127), F32(0), ftz(w))
        return np.where(~(x < F32(128)), np.where(np.isnan(x), x, F32(np.inf)), r).astype(F32)


@_any_shape
def pow_f32(x, e):
    """float_math.glsl's pow_f32 (a scalar exponent e), bit for bit: ftz(exp_f32(ftz(e log_f32|x|)))
    and C's / torch's rules for signs, zeros, infinities and NaN."""
    with np.errstate(all="ignore"):
        x, e = _f(x), F32(e)
        b = x.view(np.int32)
        integral = e == np.trunc(e)
        h = np.abs(e) * F32(0.5)
        odd = integral and abs(e) < 16777216.0 and h != np.trunc(h)
        zero, ainf = (b & 0x7FFFFFFF) == 0, (b & 0x7FFFFFFF) == 0x7F800000
        t = e * log_f32(np.abs(x))
        v = ftz(exp_f32(ftz(t)))
        inf = F32(np.inf)
        r = np.where(ainf, inf if e > 0 else F32(0), v)
        r = np.where(zero, F32(0) if e > 0 else inf, r)
        neg = b < 0
        if odd:
            r = np.where(neg, -r, r)
        if not integral:
            r = np.where(neg & ~zero & ~ainf, _NAN, r)
        r = np.where(np.isnan(x) | np.isnan(e), x + e, r)
        one = (e == 0) | (x == F32(1)) | ((x == F32(-1)) & bool(np.isinf(e)))
        return np.where(one, F32(1), r).astype(F32)


@_any_shape
def softplus_f32(x, beta, threshold, ibeta):
    """float_math.glsl's softplus_f32, bit for bit: x where beta x > threshold, else
    log1p_f32(exp_f32(beta x)) * ibeta (1 / beta rounded), each step flushed."""
    with np.errstate(all="ignore"):
        x = ftz(x)
        bx = ftz(x * F32(beta))
        l = ftz(log1p_f32(ftz(exp_f32(bx))) * F32(ibeta))
        return np.where(bx > F32(threshold), x, l).astype(F32)


@_any_shape
def mish_f32(x):
    """float_unary.comp's mish: ftz(x tanh_f32(softplus_f32(x, 1, 20)))."""
    x = ftz(x)
    return ftz(x * tanh_f32(softplus_f32(x, 1.0, 20.0, 1.0)))


@_any_shape
def elu_f32(x, alpha):
    """float_unary.comp's elu: x where x > 0 by its bits (a subnormal x > 0 too), else
    ftz(alpha (exp_f32(x) - 1))."""
    with np.errstate(all="ignore"):
        x = _f(x)
        s = ftz(F32(alpha) * (exp_f32(x) - F32(1)))
        return np.where(x.view(np.int32) > 0, x, s).astype(F32)


@_any_shape
def tanh_f32(x):
    """float_math.glsl's tanh_f32, bit for bit: sign(x) (1 - 2 recip_newton(exp_f32(2 min(|x|, 9.5)) + 1)),
    below |x| = 1/16 x + x x^2 (-1/3 + 2/15 x^2) (zeros kept), products flushed."""
    with np.errstate(all="ignore"):
        x = ftz(x)
        a = np.abs(x)
        x2 = ftz(x * x)
        small = ftz(x + ftz(ftz(x * x2) * (F32(-0.333333333) + x2 * F32(0.133333333))))
        small = np.where(x == 0, x, small)
        e = exp_f32(F32(2) * np.where(a > F32(9.5), F32(9.5), a))
        t = F32(1) - F32(2) * recip_newton(e + F32(1))
        return np.where(a < F32(0.0625), small, np.where(x < 0, -t, t)).astype(F32)


@_any_shape
def sigmoid_f32(x):
    """float_math.glsl's sigmoid_f32, bit for bit: recip_newton(1 + exp_f32(-x)) (past 2^64 scaled
    by 2^-64 around it), flushed; 0 below -87.33654."""
    x = _f(x)
    with np.errstate(all="ignore"):
        s = F32(1) + exp_f32(-x)
        k = np.where(s > F32(2.0 ** 64), F32(2.0 ** -64), F32(1))
        y = ftz(recip_newton(s * k) * k)
    return np.where(x < F32(-87.33654), F32(0), y).astype(F32)


def matmul_f32(a, b):
    """np.matmul's result (batch dims broadcast, 1-D operands as numpy promotes them) in
    float_matmul.comp's order, bit for bit: k in groups of 4 from 0, a group's products summed
    ((p0 + p1) + p2) + p3, the groups added into the accumulator in k order."""
    a, b = _f(a), _f(b)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    k = a2.shape[-1]
    if b2.shape[-2] != k:
        raise ValueError(f"matmul: inner dims differ, {a.shape} @ {b.shape}")
    acc = np.zeros(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1]), F32)
    for k0 in range(0, k, 4):
        s = None
        for kk in range(k0, min(k0 + 4, k)):
            t = a2[..., :, kk:kk + 1] * b2[..., kk:kk + 1, :]
            s = t if s is None else s + t
        acc = acc + s            # (past K the shader adds products of zeros: s unchanged)
    if a.ndim == 1:
        acc = acc[..., 0, :]
    if b.ndim == 1:
        acc = acc[..., 0]
    return acc


def _split_f32(a):
    """|x|'s bits a (finite, nonzero) as m 2^e, m in [1, 2) a float32, e an int32: a subnormal's
    mantissa field normalized through its exact conversion to float32 (a < 2^23)."""
    sub = a < np.uint32(0x00800000)
    bits = np.where(sub, a.astype(F32).view(np.uint32), a)
    e = (bits >> np.uint32(23)).astype(np.int32) - np.where(sub, np.int32(276), np.int32(127))
    m = ((bits & np.uint32(0x007FFFFF)) | np.uint32(0x3F800000)).view(F32)
    return m, e


def _residual(m, q, d, dh, dl):
    """m - q d for m, d in [1, 2), q near m / d: Dekker's product q d = hi + lo (d split as dh + dl,
    q by Veltkamp's 4097), m - hi exact (Sterbenz); exact where q is within an ulp of m / d."""
    hi = q * d
    c = F32(4097) * q
    qh = c - (c - q)
    ql = q - qh
    lo = (((qh * dh - hi) + qh * dl) + ql * dh) + ql * dl
    return (m - hi) - lo


@_any_shape
def div_f32(x, y):
    """float_math.glsl's div_f32, bit for bit: x / y from + - * and integer operations (each
    rounded once, correctly), the same bits on every device. The exact quotient rounded to
    nearest at float32's 24 bits as if the exponent range had no bounds, then: inf at or past
    2^128 (as IEEE), a zero of the quotient's sign below 2^-126. So np.divide's bits wherever
    that is a normal number, inf, zero or NaN (NaN: 0x7FC00000, any NaN operand, 0 / 0, inf /
    inf), except for quotients below the smallest normal: IEEE's subnormals, and its 2^-126
    from exact quotients in [1 - 2^-24, 1 - 2^-25) 2^-126, give a zero of the quotient's sign.
    Subnormal operands are exact (normalized on their bits)."""
    x, y = np.broadcast_arrays(_f(x), _f(y))
    ux, uy = np.ascontiguousarray(x).view(np.uint32), np.ascontiguousarray(y).view(np.uint32)
    sign = (ux ^ uy) & np.uint32(0x80000000)
    ax, ay = ux & np.uint32(0x7FFFFFFF), uy & np.uint32(0x7FFFFFFF)
    mx, ex = _split_f32(ax)             # (zeros, infs, NaNs: some m in [1, 2), replaced at the end)
    my, ey = _split_f32(ay)
    r = recip_newton(my)                # 1/my in (1/2, 1], 1.21 ulp
    c = F32(4097) * my
    mh = c - (c - my)
    ml = my - mh
    q = mx * r                          # mx / my in (1/2, 2) within 2 ulp (1.92 measured)
    q = q + _residual(mx, q, my, mh, ml) * r          # within 1/2 + 2^-21 ulp: faithful
    res = _residual(mx, q, my, mh, ml)               # exact: mx / my = q + res / my
    qb = q.view(np.uint32)
    qn = np.where(res > 0, qb + np.uint32(1), np.where(res < 0, qb - np.uint32(1), qb)).view(F32)
    t = (qn - q) * my                   # the gap to q's neighbour on the quotient's side, times my (exact)
    up = np.abs(res + res) > np.abs(t)  # past the midpoint (never on it; t has res's sign)
    qb = np.where(up, qn, q).view(np.uint32)
    e = (qb >> np.uint32(23)).astype(np.int32) + ex - ey           # the biased exponent
    bits = np.where(e >= 255, np.uint32(0x7F800000),
                    np.where(e <= 0, np.uint32(0), (e.astype(np.uint32) << np.uint32(23)) | (qb & np.uint32(0x007FFFFF))))
    inf, nan = np.uint32(0x7F800000), (ax > np.uint32(0x7F800000)) | (ay > np.uint32(0x7F800000))
    nan |= ((ax == 0) & (ay == 0)) | ((ax == inf) & (ay == inf))
    bits = np.where((ax == inf) | (ay == 0), inf, np.where((ax == 0) | (ay == inf), np.uint32(0), bits))
    return np.where(nan, np.uint32(0x7FC00000), bits | sign).view(F32).reshape(x.shape)
