"""What long work shows while it runs, on stderr: a tqdm bar over its steps (tqdm is a
dependency; without it the steps run silently) and a line for each stage that has no steps to
count. Quantizing and lowering a large model (an unrolled LSTM of 5,000 nodes) takes minutes.
On a terminal a stage's line is a status line, replaced by the next and cleared by done(), as
the bars clear themselves; elsewhere (a log) each stage stays as a line of its own."""
from __future__ import annotations

import sys


def bar(iterable, desc: str, unit: str):
    """iterable, counted on a bar that clears itself when done."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return iterable
    total = len(iterable) if hasattr(iterable, "__len__") else None
    return tqdm(iterable, desc=desc, total=total, unit=unit, leave=False)


def _terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def stage(text: str) -> None:
    if _terminal():
        sys.stderr.write(f"\r\x1b[Kvkq: {text}")
        sys.stderr.flush()
    else:
        print(f"vkq: {text}", file=sys.stderr, flush=True)


def done() -> None:
    """The end of the work: a terminal's status line cleared."""
    if _terminal():
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()
