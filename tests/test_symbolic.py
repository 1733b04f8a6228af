"""Symbolic dimensions: torch.export's expressions evaluate exactly; nothing else is accepted."""
import pytest

from vkq.symbolic import (SymbolicError, check, evaluate, evaluate_shape, expr_attr, specialize_attrs,
                          symbols_of)


@pytest.mark.parametrize("text,env,want", [
    ("s0", {"s0": 7}, 7),
    ("16*s1", {"s1": 3}, 48),
    ("(((s16 - 1)//2)) + 1", {"s16": 33}, 17),             # conv stride 2, padding 1 (torch prints)
    ("1 + (((-1) + s16) // 4)", {"s16": 33}, 9),
    ("Max(1, s0 - 5)", {"s0": 3}, 1), ("Min(s0, 8)", {"s0": 30}, 8),
    ("ceiling(s0/3)", {"s0": 7}, 3), ("floor(2*s0/3)", {"s0": 7}, 4), ("s0 % 4", {"s0": 11}, 3),
    ("-s0 + 2*s1", {"s0": 5, "s1": 4}, 3),
    ("s39**2", {"s39": 7}, 49), ("Min(s0, s1)**2 + 1", {"s0": 5, "s1": 4}, 17),    # patch counts (DINOv2, Swin)
    ("((s0 - 1)//14 + 1)**3", {"s0": 29}, 27), ("s0**0", {"s0": 9}, 1),
])
def test_expressions(text, env, want):
    assert evaluate(text, env) == want


def test_ints_shapes_and_attrs():
    assert evaluate(5, {}) == 5
    assert evaluate_shape(("s0", 3, "2*s1"), {"s0": 2, "s1": 5}) == (2, 3, 10)
    assert symbols_of("s0*s1 + 1") == {"s0", "s1"} and symbols_of(4) == set()
    attrs = {"shape": [expr_attr("s0"), 384, expr_attr(12)], "approximate": "none"}
    assert specialize_attrs(attrs, {"s0": 9}) == {"shape": [9, 384, 12], "approximate": "none"}


@pytest.mark.parametrize("bad", ['__import__("os").system("true")', "s0.real", "2**s0", "s0**9", "s0**-1", "s0**s1", "s0**2.0",
                                 "s0 if s1 else 2",
                                 "1.5*s0", "lambda: 1", "[s0]", "s0 +", "open('x')"])
def test_anything_else_is_refused(bad):
    with pytest.raises(SymbolicError):
        evaluate(bad, {"s0": 1, "s1": 1})


def test_errors_name_the_problem():
    with pytest.raises(SymbolicError, match="s9"):
        evaluate("s9 + 1", {"s0": 1})
    with pytest.raises(SymbolicError, match="divides by zero"):
        evaluate("s0 // s1", {"s0": 1, "s1": 0})
    with pytest.raises(SymbolicError, match="not an integer"):
        evaluate("s0/2", {"s0": 3})
    with pytest.raises(SymbolicError, match="undeclared"):
        check("s0 + s7", known={"s0"})
    with pytest.raises(SymbolicError):
        check(-1)
    with pytest.raises(SymbolicError):
        check(2.5)


def test_solve_a_derived_dim():
    """symbolic.solve: the one unknown symbol of a dim linear in it (torch.export's Dim * 4, or
    2*s0 + 1), or None where no integer value fits or the dim is not of that kind."""
    from vkq.symbolic import solve
    assert solve("4*s0", 36, {}) == ("s0", 9)
    assert solve("4*s0", 30, {}) is None
    assert solve("2*s0 + 1", 9, {}) == ("s0", 4)
    assert solve("s0 + s1", 7, {"s1": 3}) == ("s0", 4)
    assert solve("s0 + s1", 7, {}) is None                 # two unknowns
    assert solve("s0*s0", 9, {}) is None                    # not linear
    assert solve("(s0 - 1)//2 + 1", 5, {}) is None          # not linear either (floor)


def test_true_divisions_of_sizes_rounded_by_ceil_floor_or_trunc():
    """torch writes ceil(h / 2) of a size (MobileViT's patch grid, a resize) as
    CeilToInt(IntTrueDiv(..)): read exactly (a fraction, never a float), rounded as named."""
    from vkq.symbolic import evaluate
    assert evaluate("CeilToInt(IntTrueDiv(4*s39, 3))", {"s39": 5}) == 7
    assert evaluate("FloorToInt(IntTrueDiv(s0, 2))", {"s0": 9}) == 4
    assert evaluate("TruncToInt(IntTrueDiv(-7, 2))", {}) == -3
    assert evaluate("CeilToInt(IntTrueDiv(3*s0, 3))", {"s0": 2 ** 40 + 1}) == 2 ** 40 + 1    # exact past floats


@pytest.mark.parametrize("text,env,want", [
    ("s39*s94 != 16", {"s39": 4, "s94": 4}, False),            # DINOv2: a grid other than its table's
    ("s39*s94 != 16", {"s39": 4, "s94": 5}, True),
    ("s53 != s0", {"s53": 7, "s0": 7}, False),
    ("(s0//8) >= 2 and Mod(s1, 3) == 0", {"s0": 16, "s1": 9}, True),
    ("(s0//8) >= 2 and Mod(s1, 3) == 0", {"s0": 15, "s1": 9}, False),
    ("s0 < 4 or not (s1 <= 2)", {"s0": 5, "s1": 3}, True),
    ("s0 > s1", {"s0": 2, "s1": 2}, False),
    ("Mod(s0, s1) != 0", {"s0": 3, "s1": 0}, False),          # a division by zero: the condition fails
])
def test_conditions(text, env, want):
    from vkq.symbolic import check_condition, condition_symbols, holds
    check_condition(text, known=env)
    assert holds(text, env) is want and condition_symbols(text) == set(env)


@pytest.mark.parametrize("bad", ["s0", "s0 + 1", "s0 < s1 < 4", "s0 is s1", "s0 in (1, 2)", "s0 == 2.5",
                                 '__import__("os").system("true") == 0', "s0 <", "(lambda: 1)() == 1",
                                 "s0 == 1 if s1 else s0 == 2", "s0**s1 != 1"])
def test_anything_else_is_refused_as_a_condition(bad):
    from vkq.symbolic import check_condition, holds
    with pytest.raises(SymbolicError):
        check_condition(bad)
    with pytest.raises(SymbolicError):
        holds(bad, {"s0": 1, "s1": 1})
    with pytest.raises(SymbolicError, match="undeclared symbol.*s1"):
        check_condition("s0 != s1", known={"s0"})


@pytest.mark.parametrize("text", ["s0\x00", "(" * 300 + "s0" + ")" * 300, "+".join(["1"] * 100000), "+".join(["s0"] * 2000),
                                  "-" * 9000 + "s0", "s0 + " * 5000 + "1"])
def test_what_a_file_could_hold_is_refused_not_a_crash(text):
    """Null bytes, nesting past the parser, chains past Python's recursion, 16 KiB and more."""
    from vkq.symbolic import check_condition
    with pytest.raises(SymbolicError):
        check(text)
    with pytest.raises(SymbolicError):
        check_condition(text + " == 1")
