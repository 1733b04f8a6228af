"""HistogramObserver with the same min/max as torchao's, found without its per-step Python loop.

torchao's `_non_linear_param_search` narrows [alpha, beta] by 1e-5 a step (up to 100,000 steps an
observer), walking cumulative-sum tensors element by element in Python at every step: about 0.4 s
an observer, so a MobileViT with 275 activation observers spent 113 of its 118 s of
`vkq.compile` there. The search below takes the same steps with the same float arithmetic (the
bounds advance by repeated float64 addition, each threshold is rounded to float32 as torch's
tensor-scalar comparison rounds it, the quantization error is torchao's own function), so it
stops at the same bins; what it does not do is walk: a bin is found by binary search, and the
runs of steps that move no bin (only beta shrinks, until the last bin leaves the band) are taken
as one vector of np.subtract.accumulate, the same sequential subtractions.
tests/test_quantizer.py checks it against torchao's search on many histograms.
"""
from __future__ import annotations

import numpy as np
import torch
from torchao.quantization.pt2e import HistogramObserver as _TorchaoHistogramObserver

_STEP = 1e-5  # torchao's granularity


class HistogramObserver(_TorchaoHistogramObserver):
    def _non_linear_param_search(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.histogram.size()[0] == self.bins, "bins mismatch"
        bin_width = (self.max_val - self.min_val) / self.bins
        total = torch.sum(self.histogram).item()
        csum = torch.cumsum(self.histogram, dim=0).numpy()  # float32, non-decreasing
        f32 = np.float32
        alpha, beta = 0.0, 1.0
        start, end = 0, self.bins - 1
        norm_min = float("inf")

        def right_bin(nb: float) -> int:  # torchao: walk r down from end while csum[r] > nb * total
            return start + int(np.searchsorted(csum[start + 1:end + 1], f32(nb * total), side="right"))

        while alpha < beta:
            next_alpha, next_beta = alpha + _STEP, beta - _STEP
            # torchao: walk l up from start while l < end and csum[l] < next_alpha * total
            l = start + int(np.searchsorted(csum[start:end], f32(next_alpha * total), side="left"))
            r = right_bin(next_beta)
            if l - start > end - r:
                next_start, next_end, alpha = l, end, next_alpha
            else:
                next_start, next_end, beta = start, r, next_beta
            if next_start == start and next_end == end:
                # No bin moved: l == start and r == end. Until r leaves end, every step is the
                # same (alpha, hence l, fixed; beta shrinks), so take the run at once.
                beta = self._skip_still_steps(alpha, beta, csum[end] if end > start else None, total)
                continue
            norm = self._compute_quantization_error(next_start, next_end)
            if norm > norm_min:
                break
            norm_min, start, end = norm, next_start, next_end

        new_min = self.min_val + bin_width * start
        new_max = self.min_val + bin_width * (end + 1)
        return new_min, new_max

    @staticmethod
    def _skip_still_steps(alpha: float, beta: float, last, total: float) -> float:
        """beta after the steps that move no bin: the loop would next either stop (alpha >= beta)
        or take a step whose beta - step puts csum[end] (`last`; None where end == start, so the
        right bin cannot move) above the band. Returns the beta that step starts from."""
        n = 1024
        while True:
            seq = np.subtract.accumulate(np.concatenate(([beta], np.full(n, _STEP))))
            stop = ~(alpha < seq[:-1])                        # the loop's test before step j
            if last is not None:
                stop |= last > (seq[1:] * total).astype(np.float32)  # step j moves the right bin
            hit = np.flatnonzero(stop)
            if hit.size:
                return float(seq[hit[0]])
            beta, n = float(seq[-1]), min(4 * n, 1 << 17)
