"""What long work shows while it runs, on stderr. On a terminal: a tqdm bar over its steps (tqdm is
a dependency; without it there is no bar) and a status line for each stage that has no steps to
count, replaced by the next and cleared by done(), as the bars clear themselves. Elsewhere (a log,
a captured stream) a line for each stage and each counted step, and no bar redrawn into the file.
Quantizing and lowering a large model (an unrolled LSTM of 5,000 nodes) takes minutes."""
from __future__ import annotations

import sys


def _terminal() -> bool:
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def _tqdm():
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}{'es' if unit.endswith(('s', 'sh', 'ch')) else 's'}"


def bar(iterable, desc: str, unit: str):
    """iterable, counted on a bar that clears itself when done."""
    total = len(iterable) if hasattr(iterable, "__len__") else None
    if not _terminal() or _tqdm() is None:
        stage(desc if total is None else f"{desc}: {_count(total, unit)}")
        return iterable
    return _tqdm()(iterable, desc=desc, total=total, unit=unit, leave=False)


def named_steps(items: list, desc: str, unit: str, name=str):
    """items one by one, each named on the bar while it runs (tqdm's own iteration redraws its
    count late: a step that takes seconds showed the one before it)."""
    if not _terminal() or _tqdm() is None:
        stage(f"{desc}: {_count(len(items), unit)}")
        yield from items
        return
    with _tqdm()(total=len(items), desc=desc, unit=unit, leave=False) as shown:
        for item in items:
            shown.set_postfix_str(name(item))
            yield item
            shown.update(1)


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
