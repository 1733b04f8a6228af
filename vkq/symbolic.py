"""Symbolic dimensions: integer expressions in a program's input symbols.

A dimension is an int or an expression over symbols as torch.export writes them:
"s0", "16*s1", "(((s2 - 1)//2)) + 1", "1 + (((-1) + s2) // 4)", "Max(1, s0)". Expressions are
read with Python's parser and only integer arithmetic is accepted — + - * // % and unary minus,
a power by a small constant (DINOv2's and Swin's h**2), parentheses, Max/Min, floor/ceiling/trunc of an exact quotient (IntTrueDiv: torch's a / b of
sizes, F.interpolate's and MobileViT's ceil(h / 2)) — so a program file can never run
code, and a bad expression is refused when the program is made or loaded, not midway through a
call. Quotients are exact (fractions), never floats.

A condition (Program.checks: a guard torch.export traced the model under, "h*w != 16") is
comparisons of such expressions (== != < <= > >=) joined by and / or / not.
"""
from __future__ import annotations

import ast
import functools
import operator
from fractions import Fraction

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Div: Fraction}
_CALLS = {"Max": max, "max": max, "Min": min, "min": min,
          "floor": lambda x: int(x // 1), "FloorToInt": lambda x: int(x // 1),
          "ceiling": lambda x: int(-(-x // 1)), "ceil": lambda x: int(-(-x // 1)),
          "CeilToInt": lambda x: int(-(-x // 1)),
          "FloorDiv": operator.floordiv, "Mod": operator.mod, "PythonMod": operator.mod,
          "IntTrueDiv": Fraction, "FloatTrueDiv": Fraction,          # (exact: rounded by a Ceil/Floor around them)
          "TruncToInt": lambda x: int(x), "trunc": lambda x: int(x)}


MAX_POWER = 8          # x**k for a constant k up to this (no file can make a huge number)


class SymbolicError(ValueError):
    """An expression vkq cannot read, or a binding it cannot satisfy."""


def is_symbolic(dim) -> bool:
    return isinstance(dim, str)


def plus(dim, k: int):
    """dim + k, dim an int or an expression (a size a pass computes from a dynamic one)."""
    return dim + k if isinstance(dim, int) else f"({dim}) + {k}"


def times(a, b):
    """a * b, each an int or an expression."""
    return a * b if isinstance(a, int) and isinstance(b, int) else f"({a}) * ({b})"


MAX_TEXT = 16384       # characters of one expression or condition (export's guards on Swin reach ~3000)


def _parse(text: str, what: str):
    """The expression's syntax tree, or SymbolicError: not text, too long, not Python, or
    nested past the parser's depth (a file could hold any of these)."""
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise SymbolicError(f"not {what}: {str(text)[:60]!r} ({len(str(text))} characters)")
    try:
        return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise SymbolicError(f"not {what}: {text[:200]!r}") from None


def _built(build, tree, text):
    try:
        return build(tree)
    except RecursionError:
        raise SymbolicError(f"{text[:60]!r}...: nested too deep") from None


@functools.lru_cache(maxsize=4096)
def _compile(text: str):
    """(function of a bindings dict, frozenset of symbols) for one expression."""
    tree = _parse(text, "an integer expression")
    names = set()

    def build(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            v = node.value
            return lambda env: v
        if isinstance(node, ast.Name):
            names.add(node.id)
            key = node.id
            return lambda env: env[key]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            f = build(node.operand)
            return (lambda env: -f(env)) if isinstance(node.op, ast.USub) else f
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) \
                and type(node.right.value) is int and 0 <= node.right.value <= MAX_POWER:
            a, k = build(node.left), node.right.value      # (a constant small exponent: a patch count h**2)
            return lambda env: a(env) ** k
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            a, b, fn = build(node.left), build(node.right), _BINARY[type(node.op)]
            return lambda env: fn(a(env), b(env))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS
                and node.args and not node.keywords):
            fn, args = _CALLS[node.func.id], [build(a) for a in node.args]
            return lambda env: fn(*(a(env) for a in args))
        raise SymbolicError(f"{text!r}: {ast.dump(node)[:60]} is not integer arithmetic vkq accepts")

    fn = _built(build, tree, text)
    return fn, frozenset(names)


_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


@functools.lru_cache(maxsize=1024)
def _compile_condition(text: str):
    """(function of a bindings dict -> bool, frozenset of symbols) for one condition."""
    tree = _parse(text, "a condition")
    names = set()

    def side(node):
        fn, used = _compile(ast.unparse(node))
        names.update(used)
        return fn

    def build(node):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            a, b, op = side(node.left), side(node.comparators[0]), _COMPARE[type(node.ops[0])]
            return lambda env: op(a(env), b(env))
        if isinstance(node, ast.BoolOp):
            parts, want = [build(v) for v in node.values], isinstance(node.op, ast.Or)
            return (lambda env: any(p(env) for p in parts)) if want else (lambda env: all(p(env) for p in parts))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            f = build(node.operand)
            return lambda env: not f(env)
        raise SymbolicError(f"{text!r}: {ast.dump(node)[:60]} is not a comparison of integer expressions")

    fn = _built(build, tree, text)
    return fn, frozenset(names)


def check_condition(text, known=None) -> None:
    """Raise SymbolicError unless text is a readable condition (over `known` symbols)."""
    if not isinstance(text, str):
        raise SymbolicError(f"a condition is a string, not {text!r}")
    used = _compile_condition(text)[1]          # parses: an unreadable condition raises here
    unknown = used - set(known) if known is not None else set()
    if unknown:
        raise SymbolicError(f"{text!r} uses undeclared symbol(s) {', '.join(sorted(unknown))}")


def condition_symbols(text: str) -> frozenset:
    return _compile_condition(text)[1]


def holds(text: str, bindings: dict) -> bool:
    """Whether a condition holds under concrete symbol values (a division by zero: it does not)."""
    fn, names = _compile_condition(text)
    missing = names - set(bindings)
    if missing:
        raise SymbolicError(f"{text!r} needs a value for {', '.join(sorted(missing))}")
    try:
        return bool(fn(bindings))
    except ZeroDivisionError:
        return False
    except RecursionError:
        raise SymbolicError(f"{text[:60]!r}...: nested too deep to evaluate") from None


def symbols_of(dim) -> frozenset:
    """The symbols a dimension depends on (empty for an int)."""
    return _compile(dim)[1] if is_symbolic(dim) else frozenset()


def check(dim, known=None) -> None:
    """Raise SymbolicError unless dim is an int >= 0 or a readable expression (over `known`
    symbols, when given)."""
    if isinstance(dim, bool) or not isinstance(dim, (int, str)):
        raise SymbolicError(f"a dimension is an int or an expression string, not {dim!r}")
    if isinstance(dim, int):
        if dim < 0:
            raise SymbolicError(f"negative dimension {dim}")
        return
    used = symbols_of(dim)          # parses: an unreadable expression raises here
    unknown = used - set(known) if known is not None else set()
    if unknown:
        raise SymbolicError(f"{dim!r} uses undeclared symbol(s) {', '.join(sorted(unknown))}")


def evaluate(dim, bindings: dict) -> int:
    """The value of a dimension (int or expression) under concrete symbol values."""
    if not is_symbolic(dim):
        return int(dim)
    fn, names = _compile(dim)
    missing = names - set(bindings)
    if missing:
        raise SymbolicError(f"{dim!r} needs a value for {', '.join(sorted(missing))}")
    try:
        value = fn(bindings)
    except ZeroDivisionError:
        raise SymbolicError(f"{dim!r} divides by zero at {bindings}") from None
    except RecursionError:
        raise SymbolicError(f"{dim[:60]!r}...: nested too deep to evaluate") from None
    if isinstance(value, Fraction):
        if value.denominator != 1:
            raise SymbolicError(f"{dim!r} is not an integer at {bindings}")
        value = int(value)
    return int(value)


def solve(dim, value: int, bindings: dict) -> tuple[str, int] | None:
    """(symbol, its value) that makes dim equal value, for a dim linear in the one symbol the
    bindings lack (a derived input dim such as 4*s0, torch.export's Dim * 4); None where dim is
    not such a dim or no integer value fits (a size that is not a multiple of 4)."""
    unknown = sorted(symbols_of(dim) - set(bindings))
    if len(unknown) != 1:
        return None
    sym = unknown[0]
    try:
        b = evaluate(dim, {**bindings, sym: 0})
        a = evaluate(dim, {**bindings, sym: 1}) - b
    except SymbolicError:
        return None
    if a == 0 or (value - b) % a:
        return None
    v = (value - b) // a
    try:
        ok = evaluate(dim, {**bindings, sym: v}) == value and evaluate(dim, {**bindings, sym: v + 2}) == value + 2 * a
    except SymbolicError:
        return None
    return (sym, v) if ok else None


def evaluate_shape(shape, bindings: dict) -> tuple:
    return tuple(evaluate(d, bindings) for d in shape)


def specialize_attrs(value, bindings: dict):
    """Attrs with symbolic ints (marked {"expr": "..."}, see expr_attr) made concrete."""
    if isinstance(value, dict):
        if set(value) == {"expr"}:
            return evaluate(value["expr"], bindings)
        return {k: specialize_attrs(v, bindings) for k, v in value.items()}
    if isinstance(value, list):
        return [specialize_attrs(v, bindings) for v in value]
    if isinstance(value, tuple):
        return tuple(specialize_attrs(v, bindings) for v in value)
    return value


def expr_attr(dim):
    """An attr value for a dimension: the int itself, or {"expr": text} for an expression
    (attrs also hold genuine strings, so expressions are marked)."""
    return {"expr": dim} if is_symbolic(dim) else int(dim)


def attrs_symbolic(value) -> bool:
    if isinstance(value, dict):
        return set(value) == {"expr"} or any(attrs_symbolic(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(attrs_symbolic(v) for v in value)
    return False
