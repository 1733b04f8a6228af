"""HistogramObserver with the same min/max as torchao's, found without its per-step Python loop.

torchao's `_non_linear_param_search` narrows [alpha, beta] by 1e-5 a step (up to 100,000 steps an
observer), walking cumulative-sum tensors element by element in Python at every step: about 0.4 s
an observer, so a MobileViT with 275 activation observers spent 113 of its 118 s of
`vkq.compile` there. The search below takes the same steps with the same float arithmetic (the
bounds advance by repeated float64 addition, each threshold is rounded to float32 as torch's
tensor-scalar comparison rounds it, the quantization error is torchao's float32 operations in its
order), so it stops at the same bins; what it does not do is walk: a bin is found by binary
search, the runs of steps that move no bin (only beta shrinks, until the last bin leaves the band)
are taken as one vector of np.subtract.accumulate, the same sequential subtractions, and the
errors of the candidates are computed for up to 256 at once (torchao's ~25 tensor operations a
candidate cost more in dispatch than in arithmetic: a MobileViTV2 at 64 px, 206 observers, spent
15.6 s in the search, 9.5 s so.)
tests/test_quantizer.py checks it against torchao's search on many histograms.
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import torch
from torchao.quantization.pt2e import HistogramObserver as _TorchaoHistogramObserver

_STEP = 1e-5  # torchao's granularity


class HistogramObserver(_TorchaoHistogramObserver):
    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        """torchao's, which leaves infinities out of the range, leaving NaNs out too (torchao's
        histc fails on a NaN range: an lp_pool of negative values, a log of a negative one)."""
        nan = torch.isnan(x_orig.detach())
        if not bool(nan.any()):
            return super().forward(x_orig)
        warnings.warn("vkq: NaN in an activation during calibration (the float model computes NaN for "
                      "these inputs); its range is taken from the other values", stacklevel=2)
        if not bool(nan.all()):
            super().forward(x_orig.detach()[~nan])
        return x_orig

    def _non_linear_param_search(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.histogram.size()[0] == self.bins, "bins mismatch"
        bin_width = (self.max_val - self.min_val) / self.bins
        start, end = 0, self.bins - 1
        norm_min = float("inf")
        # The walk's candidates do not depend on the errors (each step either stops the search
        # or takes the candidate), so they are scored a batch at a time; what is scored past the
        # stop is thrown away.
        candidates, batch = self._candidates(), 16
        while chunk := list(itertools.islice(candidates, batch)):
            for (next_start, next_end), norm in zip(chunk, self._quantization_errors(chunk)):
                if norm > norm_min:
                    return self.min_val + bin_width * start, self.min_val + bin_width * (end + 1)
                norm_min, start, end = norm, next_start, next_end
            batch = min(2 * batch, 256)
        return self.min_val + bin_width * start, self.min_val + bin_width * (end + 1)

    def _candidates(self):
        """torchao's walk of [alpha, beta] (1e-5 a step): the (start, end) bins it scores, in order,
        each taken as the new bounds (the caller stops at the first worse one)."""
        total = torch.sum(self.histogram).item()
        csum = torch.cumsum(self.histogram, dim=0).numpy()  # float32, non-decreasing
        f32 = np.float32
        alpha, beta = 0.0, 1.0
        start, end = 0, self.bins - 1
        while alpha < beta:
            next_alpha, next_beta = alpha + _STEP, beta - _STEP
            # torchao: walk l up from start while l < end and csum[l] < next_alpha * total
            l = start + int(np.searchsorted(csum[start:end], f32(next_alpha * total), side="left"))
            # torchao: walk r down from end while csum[r] > next_beta * total
            r = start + int(np.searchsorted(csum[start + 1:end + 1], f32(next_beta * total), side="right"))
            if l - start > end - r:
                next_start, next_end, alpha = l, end, next_alpha
            else:
                next_start, next_end, beta = start, r, next_beta
            if next_start == start and next_end == end:
                # No bin moved: l == start and r == end. Until r leaves end, every step is the
                # same (alpha, hence l, fixed; beta shrinks), so take the run at once.
                beta = self._skip_still_steps(alpha, beta, csum[end] if end > start else None, total)
                continue
            yield next_start, next_end
            start, end = next_start, next_end

    def _quantization_errors(self, pairs: list) -> list:
        """torchao's `_compute_quantization_error` for each (start, end) bin pair, its float32
        operations in its order on a [pairs, bins] batch (the per-pair scalars become float32
        [pairs, 1] columns, as torch casts a Python float against a float32 tensor), each row
        summed on its own as torchao sums its vector: the same bits, one pass for the batch."""
        bin_width = (self.max_val.item() - self.min_val.item()) / self.bins
        dst_width = [bin_width * (e - s + 1) / self.dst_nbins for s, e in pairs]
        if not any(dst_width):
            return [0.0] * len(pairs)
        col = lambda xs: torch.tensor(xs, dtype=torch.float32)[:, None]   # noqa: E731
        width, half, neg_half = col(dst_width), col([w / 2 for w in dst_width]), col([-w / 2 for w in dst_width])
        src_bin = torch.arange(self.bins, device=self.histogram.device)
        src_bin_begin = (src_bin - torch.tensor([s for s, _ in pairs])[:, None]) * bin_width
        src_bin_end = src_bin_begin + bin_width
        top = self.dst_nbins - 1
        dst_bin_of_begin = torch.clamp(torch.div(src_bin_begin, width, rounding_mode="floor"), 0, top)
        dst_bin_of_begin_center = (dst_bin_of_begin + 0.5) * width
        dst_bin_of_end = torch.clamp(torch.div(src_bin_end, width, rounding_mode="floor"), 0, top)
        density = self.histogram / bin_width
        norm = torch.zeros(len(pairs), self.bins, device=self.histogram.device)
        norm += self._get_norm(src_bin_begin - dst_bin_of_begin_center, half.expand(-1, self.bins), density)
        norm += (dst_bin_of_end - dst_bin_of_begin - 1) * self._get_norm(neg_half, half, density)
        dst_bin_of_end_center = dst_bin_of_end * width + half
        norm += self._get_norm(neg_half, src_bin_end - dst_bin_of_end_center, density)
        return [row.sum().item() if w != 0.0 else 0.0 for row, w in zip(norm, dst_width)]

    @staticmethod
    def _skip_still_steps(alpha: float, beta: float, last, total: float) -> float:
        """beta after the steps that move no bin: the loop would next either stop (alpha >= beta)
        or take a step whose beta - step puts csum[end] (`last`; None where end == start, so the
        right bin cannot move) above the band. Returns the beta that step starts from."""
        n = 256       # (a run is 54 steps at the median, 424 at the 99th percentile: MobileViTV2)
        while True:
            seq = np.subtract.accumulate(np.concatenate(([beta], np.full(n, _STEP))))
            stop = ~(alpha < seq[:-1])                        # the loop's test before step j
            if last is not None:
                stop |= last > (seq[1:] * total).astype(np.float32)  # step j moves the right bin
            hit = np.flatnonzero(stop)
            if hit.size:
                return float(seq[hit[0]])
            beta, n = float(seq[-1]), min(4 * n, 1 << 17)
