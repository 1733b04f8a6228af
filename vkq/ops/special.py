"""Float64 references of the special functions: the specification that float_unary's float32
kernels (shaders/include/float_math.glsl) are tested against, each rounded to float32 by
vkq.ops.float. numpy and math only (the runner needs neither torch nor scipy); where torch's
float32 kernels give a value that is not the function's (i0(inf) = NaN, polygamma(2, inf) = NaN,
trigamma(-1) finite), these give the function's, the limit or its pole.

  erf64, erfc64                 math.erf / math.erfc
  lgamma64, digamma64, erfinv64 log|Gamma|, psi, the inverse of erf
  bessel_i64(x, order, scaled)  I0, I1 and e^-|x| I0, e^-|x| I1 (torch.i0, special.i0e, i1, i1e)
  ndtri64                       the inverse of the normal distribution function (special.ndtri)
  erfcx64                       e^(x^2) erfc(x) (special.erfcx; log_ndtr decomposes to it)
  polygamma64(x, n)             the n-th derivative of psi (torch.polygamma)
"""
from __future__ import annotations

import math

import numpy as np

_ERF, _ERFC = np.frompyfunc(math.erf, 1, 1), np.frompyfunc(math.erfc, 1, 1)


def _as64(x):
    return np.asarray(x, np.float64)


def erf64(x):
    """erf elementwise in float64 (math.erf; numpy has none)."""
    return _ERF(_as64(x)).astype(np.float64)


def erfc64(x):
    return _ERFC(_as64(x)).astype(np.float64)


def lgamma64(x):
    """log|Gamma(x)| in float64 (math.lgamma; inf at its poles, as torch)."""
    def one(v):
        try:
            return math.lgamma(v)
        except (ValueError, OverflowError):
            return math.inf
    return np.vectorize(one, otypes=[np.float64])(x)


def digamma64(x):
    """digamma in float64: stepped up to x >= 10 by psi(x + 1) = psi(x) + 1/x, then the asymptotic
    series to x^-12 (under 1e-14 there); x < 0 the reflection psi(1 - x) - pi / tan(pi x). As torch:
    psi(+-0) = -+inf, NaN at the negative integers and -inf."""
    x = _as64(x)
    neg = x < 0
    refl = np.where(neg, -np.pi / np.tan(np.pi * (x - np.round(x))), 0.0)
    y, acc = np.where(neg, 1 - x, x), np.zeros_like(x)
    for _ in range(10):
        small = y < 10
        acc -= np.where(small, 1 / y, 0.0)
        y = np.where(small, y + 1, y)
    z = 1 / (y * y)
    series = z * (1 / 12 - z * (1 / 120 - z * (1 / 252 - z * (1 / 240 - z * (1 / 132 - z * 691 / 32760)))))
    r = refl + acc + np.log(y) - 0.5 / y - series
    r = np.where(x == 0, np.copysign(np.inf, -x), r)
    return np.where((neg & (x == np.floor(x))) | np.isnan(x), np.nan, np.where(np.isposinf(x), np.inf, r))


_ERFINV_CENTRE = [2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941]
_ERFINV_TAIL = [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682]


def erfinv64(y):
    """erfinv in float64: Giles' approximation (the shaders' erfinv_f32, ~3e-7) refined by two
    Newton steps on erf (on erfc past |y| = 1/2, where 1 - |y| is exact); +-inf at +-1, NaN past."""
    y = _as64(y)
    a = np.abs(y)
    inside = a < 1
    a_in = np.where(inside, a, 0.0)
    w = -np.log((1 - a_in) * (1 + a_in))
    x = np.where(w < 5, np.polyval(_ERFINV_CENTRE, w - 2.5), np.polyval(_ERFINV_TAIL, np.sqrt(w) - 3)) * a_in
    for _ in range(2):      # erf(x) - a, as (1 - a) - erfc(x) near 1
        f = np.where(a_in > 0.5, (1 - a_in) - erfc64(x), erf64(x) - a_in)
        x = x - f / (2 / np.sqrt(np.pi) * np.exp(-x * x))
    x = np.where(inside, x, np.where(a == 1, np.inf, np.nan))
    return np.copysign(x, y)


def bessel_i64(x, order: int, scaled: bool):
    """I_order(x), order 0 or 1, or e^-|x| I_order(x) where scaled: the power series sum (x/2)^(2k +
    order) / (k! (k + order)!) up to |x| = 30 (90 terms: the rest below 1e-60 of the sum), past it
    the asymptotic series e^|x| / sqrt(2 pi |x|) sum_k (-1)^k prod_j (4 order^2 - (2j - 1)^2) /
    (k! (8|x|)^k) (20 terms: under 1e-17 from 30 on). I1 odd (I1(-0) = +0, as torch); inf at +-inf
    (+-inf for I1), scaled +-0."""
    x = _as64(x)
    a = np.abs(x)
    small = np.minimum(a, 30.0)
    q = (small / 2) ** 2
    term = np.ones_like(a) if order == 0 else small / 2
    total = term.copy()
    for k in range(1, 90):
        term = term * q / (k * (k + order))
        total = total + term
    big = np.maximum(a, 30.0)
    t = np.ones_like(a)
    asym = t.copy()
    for k in range(1, 20):
        t = t * -(4 * order * order - (2 * k - 1) ** 2) / (8 * k * big)
        asym = asym + t
    asym = asym / np.sqrt(2 * np.pi * big)
    r = np.where(a <= 30, total * np.exp(-small), asym)          # e^-|x| I
    if not scaled:
        r = np.where(np.isposinf(a), np.inf, r * np.exp(a))
    return np.where(x < 0, -r, r) if order == 1 else r


# Cephes' ndtri (torch's calc_ndtri): rational functions, highest degree first
_NDTRI_P0 = [-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1,
             1.39312609387279679503e1, -1.23916583867381258016e0]
_NDTRI_Q0 = [1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1,
             -2.25462687854119370527e2, 2.00260212380060660359e2, -8.20372256168333339912e1,
             1.59056225126211695515e1, -1.18331621121330003142e0]
_NDTRI_P1 = [4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1,
             4.40805073893200834700e1, 1.46849561928858024014e1, 2.18663306850790267539e0,
             -1.40256079171354495875e-1, -3.50424626827848203418e-2, -8.57456785154685413611e-4]
_NDTRI_Q1 = [1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1,
             1.50425385692907503408e1, 2.50464946208309415979e0, -1.42182922854787788574e-1,
             -3.80806407691578277194e-2, -9.33259480895457427372e-4]
_NDTRI_P2 = [3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0,
             1.33303460815807542389e0, 2.01485389549179081538e-1, 1.23716634817820021358e-2,
             3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9]
_NDTRI_Q2 = [1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0,
             2.16236993594496635890e-1, 1.34204006088543189037e-2, 3.28014464682127739104e-4,
             2.89247864745380683936e-6, 6.79019408009981274425e-9]


def ndtri64(p):
    """x with Phi(x) = p: Cephes' ndtri in float64 (about 1e-16 relative): a rational function of
    (p - 1/2)^2 in the centre, of 1 / sqrt(-2 log y) in the tails (y the nearer tail's area).
    -inf at 0, inf at 1, NaN outside [0, 1]."""
    p = _as64(p)
    inside = (p > 0) & (p < 1)
    pi = np.where(inside, p, 0.5)
    upper = pi > 1 - math.exp(-2)
    y = np.where(upper, 1 - pi, pi)
    c = y - 0.5
    c2 = c * c
    centre = (c + c * (c2 * np.polyval(_NDTRI_P0, c2) / np.polyval(_NDTRI_Q0, c2))) * math.sqrt(2 * math.pi)
    t = np.sqrt(-2 * np.log(y))
    z = 1 / t
    near = z * np.polyval(_NDTRI_P1, z) / np.polyval(_NDTRI_Q1, z)
    far = z * np.polyval(_NDTRI_P2, z) / np.polyval(_NDTRI_Q2, z)
    tail = (t - np.log(t) / t) - np.where(t < 8, near, far)
    r = np.where(y > math.exp(-2), centre, np.where(upper, tail, -tail))
    return np.where(inside, r, np.where(p == 0, -np.inf, np.where(p == 1, np.inf, np.nan)))


def erfcx64(x):
    """e^(x^2) erfc(x) in float64: as written up to |x| = 26 (e^676 and erfc(26) ~ 6e-296 are both
    float64s), past it 1 / (|x| sqrt(pi)) sum_k (-1)^k (2k - 1)!! / (2x^2)^k (8 terms: < 1e-20);
    below 0 2 e^(x^2) - erfcx(-x) (inf from x = -26.6)."""
    x = _as64(x)
    a = np.abs(x)
    mid = np.minimum(a, 26.0)
    big = np.maximum(a, 26.0)
    t = np.ones_like(a)
    asym = t.copy()
    for k in range(1, 9):
        t = t * -(2 * k - 1) / (2 * big * big)
        asym = asym + t
    pos = np.where(a <= 26, np.exp(mid * mid) * erfc64(mid), asym / (big * math.sqrt(math.pi)))
    return np.where(x < 0, 2 * np.exp(x * x) - pos, pos)


# B_2j / (2j)!, the Euler-Maclaurin coefficients
_EM = [1 / 12, -1 / 720, 1 / 30240, -1 / 1209600, 1 / 47900160, -691 / 1307674368000, 1 / 74724249600,
       -3617 / 10670622842880000, 43867 / 5109094217170944000, -174611 / 802857662698291200000]


def _zeta_fact64(n: int, q):
    """n! zeta(n + 1, q) for q > 0: the terms summed until q + k >= 20 + n, then Euler-Maclaurin
    with 10 terms (each term's ratio to the last is below ((n + 21) / (2 pi (n + 20)))^2)."""
    s, fact = n + 1, float(math.factorial(n))
    total, a = np.zeros_like(q), q.copy()
    for _ in range(21 + n):
        step = a < 20 + n
        total = total + np.where(step, fact * a ** -s, 0.0)
        a = np.where(step, a + 1, a)
    h = s / (a * a)
    bracket = 1 / n + 0.5 / a + _EM[0] * h
    for j in range(2, len(_EM) + 1):
        h = h * (s + 2 * j - 3) * (s + 2 * j - 2) / (a * a)
        bracket = bracket + _EM[j - 1] * h
    return total + fact * a ** -n * bracket


def _cot_derivative64(x, n: int):
    """d^n/dx^n cot(pi x) = pi^n P_n(cot pi x), P_0 = c, P_(k+1) = -(1 + c^2) P_k': here n! pi^(n+1)
    Q_n(c) with Q_k = P_k / k! (coefficients below 2^k), n! pi^(n+1) multiplied in factor by factor."""
    q = np.zeros(n + 3)
    q[1] = 1.0
    for k in range(n):
        d = np.arange(1, len(q)) * q[1:]                       # Q_k'
        nxt = np.zeros_like(q)
        nxt[:len(d)] -= d
        nxt[2:] -= d[:len(q) - 2]
        q = nxt / (k + 1)
    c = 1 / np.tan(np.pi * (x - np.round(x)))
    r = np.polynomial.polynomial.polyval(c, q) * np.pi
    for i in range(1, n + 1):
        r = r * (i * np.pi)
    return r


def polygamma64(x, n: int):
    """psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for n >= 1 (n = 0 is digamma64). Below 0 the
    reflection psi^(n)(x) = -pi^(n+1) P_n(cot pi x) - n! zeta(n + 1, 1 - x) (summing the terms left
    of 0 instead cancels: two of 1e49 for psi^(34)(-0.5) = -2e32). Poles (x <= 0 integral): +inf,
    -inf for even n (torch's signs); +inf: +-0; -inf: NaN."""
    x = _as64(x)
    sgn = 1.0 if n % 2 else -1.0
    pole = (x <= 0) & (x == np.floor(x))
    finite = np.isfinite(x) & ~pole
    xf = np.where(finite, x, 1.0)
    pos = sgn * _zeta_fact64(n, np.where(xf > 0, xf, 1.0))
    xn = np.where(xf < 0, xf, -0.5)
    neg = -(_cot_derivative64(xn, n) + _zeta_fact64(n, 1 - xn))
    r = np.where(xf > 0, pos, neg)
    r = np.where(pole, sgn * np.inf, r)
    r = np.where(np.isposinf(x), sgn * 0.0, r)
    return np.where(np.isnan(x) | np.isneginf(x), np.nan, r)
