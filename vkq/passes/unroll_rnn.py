"""unroll_rnn: nn.LSTM / nn.GRU / nn.RNN over a sequence of static length, as the ops of their
cells, step by step.

torch.export keeps a recurrent layer as one call (aten.lstm.input, aten.gru.input,
aten.rnn_tanh.input, aten.rnn_relu.input: input, initial state, the flat weights, has_biases,
num_layers, dropout, train, bidirectional, batch_first), which has no kernel: it ran in float on
the CPU, in torch, so a CRNN's or a speech model's saved program needed torch to run. Written out
as PyTorch computes it (the gate order i, f, g, o and r, z, n of nn.LSTM and nn.GRU), every step
is ops that have kernels under every scheme, and the quantizer (which runs this before annotating,
VkqQuantizer.transform_for_annotation) makes the linears int8 like any other:

  per layer and direction:   xp = linear(x, W_ih, b)      all steps' input projections at once;
                                                            b = b_ih + b_hh (GRU: b_hh's r and z
                                                            parts only, its n part stays inside r*)
  LSTM step t:   gates = xp[t] + linear(h, W_hh)
                 s = sigmoid(gates); i, f, o = s[0:H], s[H:2H], s[3H:4H]; g = tanh(gates[2H:3H])
                 c = f * c + i * g;  h = o * tanh(c)  [h = linear(h, W_hr) with proj_size]
  GRU step t:    gh = linear(h, W_hh, (0, 0, b_hn));  rz = sigmoid(xp[t][0:2H] + gh[0:2H])
                 n = tanh(xp[t][2H:3H] + r * gh[2H:3H]);  h = n + z * (h - n)
  RNN step t:    h = tanh / relu(xp[t] + linear(h, W_hh))

nn.LSTMCell / GRUCell / RNNCell (aten.lstm_cell, gru_cell, rnn_tanh_cell, rnn_relu_cell: one
step, a decoder's loop body) are the same step, once. The reverse direction walks t from the
last step down; the output is the steps' h concatenated along time (the directions along
features), h_n / c_n the last ones stacked. An initial state that is a constant zero (nn.LSTM
called without one) drops the first step's recurrent terms. A symbolic sequence length (dynamic shapes) or packed sequences keep the call as it is (CPU).
The graph grows by about 12 nodes a step: MAX_STEPS bounds layers x directions x length.
"""
from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

from ._graph import add_constant, aten, const_value, finish, reject, val

RNNS = {aten.lstm.input: "lstm", aten.gru.input: "gru", aten.rnn_tanh.input: "tanh", aten.rnn_relu.input: "relu"}
CELLS = {aten.lstm_cell.default: "lstm", aten.gru_cell.default: "gru", aten.rnn_tanh_cell.default: "tanh",
         aten.rnn_relu_cell.default: "relu"}
GATES = {"lstm": 4, "gru": 3, "tanh": 1, "relu": 1}
MAX_STEPS = 2048
ZEROS = {aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default}


def _is_zero(gm: GraphModule, node) -> bool:
    if isinstance(node, Node) and node.op == "call_function":
        if node.target in ZEROS:
            return True
        if node.target in (aten.full.default, aten.new_full.default, aten.full_like.default):
            return node.args[-1] == 0
        if node.target in (aten.select.int, aten.slice.Tensor, aten.unsqueeze.default):
            return _is_zero(gm, node.args[0])
    c = const_value(gm, node)
    return c is not None and not bool(c.any())


class _Cells:
    """Builds the unrolled graph before `at`. A state known to be zero is None, and every helper
    takes None as that zero, so the first step's recurrent terms are never built."""

    def __init__(self, gm: GraphModule, at: Node):
        self.gm, self.at = gm, at
        self.fake = torch._guards.detect_fake_mode([val(at.args[0])])   # export's, for the constants' vals

    def call(self, target, *args) -> Node:
        with self.gm.graph.inserting_before(self.at):
            node = self.gm.graph.call_function(target, args)
        node.meta["val"] = target(*map_arg(args, val))
        return node

    def const(self, hint: str, value: torch.Tensor) -> Node:
        node = add_constant(self.gm, f"{self.at.name}_{hint}", value.detach().float(), self.at)
        if self.fake is not None:       # (a meta tensor beside export's fake ones would not mix)
            node.meta["val"] = self.fake.from_tensor(self.gm.get_buffer(node.target))
        return node

    def linear(self, x, w, b=None):
        return None if x is None and b is None else b if x is None else self.call(aten.linear.default, x, w, b)

    def add(self, a, b):
        return b if a is None else a if b is None else self.call(aten.add.Tensor, a, b)

    def mul(self, a, b):
        return None if a is None or b is None else self.call(aten.mul.Tensor, a, b)

    def part(self, x, k: int, size: int, n: int = 1):
        """Gate k (n gates from it) of the last dim of x."""
        return None if x is None else self.call(aten.slice.Tensor, x, -1, k * size, (k + n) * size)


def _lstm_step(b: _Cells, xt, h, c, w_hh, w_hr, size):
    gates = b.add(xt, b.linear(h, w_hh))
    s = b.call(aten.sigmoid.default, gates)
    i, f, o = b.part(s, 0, size), b.part(s, 1, size), b.part(s, 3, size)
    g = b.call(aten.tanh.default, b.part(gates, 2, size))
    c = b.add(b.mul(f, c), b.mul(i, g))
    h = b.mul(o, b.call(aten.tanh.default, c))
    return (h if w_hr is None else b.linear(h, w_hr)), c


def _gru_step(b: _Cells, xt, h, w_hh, b_hn, size):
    """b_hn: the n gate's recurrent bias, a (3H,) constant zero in r and z (None if all zero);
    with h zero, gh is that constant and only its n part is kept."""
    if h is None:
        rz = b.call(aten.sigmoid.default, b.part(xt, 0, size, 2))
        gh_n = None if b_hn is None else b.part(b_hn, 2, size)
    else:
        gh = b.linear(h, w_hh, b_hn)
        rz = b.call(aten.sigmoid.default, b.add(b.part(xt, 0, size, 2), b.part(gh, 0, size, 2)))
        gh_n = b.part(gh, 2, size)
    r, z = b.part(rz, 0, size), b.part(rz, 1, size)
    n = b.call(aten.tanh.default, b.add(b.part(xt, 2, size), b.mul(r, gh_n)))
    if h is None:
        return b.call(aten.sub.Tensor, n, b.mul(z, n))
    return b.add(n, b.mul(z, b.call(aten.sub.Tensor, h, n)))


def _rewrite(gm: GraphModule, node: Node) -> dict | None:
    kind = RNNS[node.target]
    x, hx, params, has_biases, layers, _dropout, train, bidirectional, batch_first = node.args[:9]
    vx = val(x)
    if train or not isinstance(vx, torch.Tensor) or vx.dim() != 3:
        return None
    steps = vx.shape[1 if batch_first else 0]
    dirs = 2 if bidirectional else 1
    if not isinstance(steps, int) or steps < 1:
        reject(node, f"{node.target}: the sequence length is symbolic (a recurrence unrolls over a fixed length)")
        return None
    if layers * dirs * steps > MAX_STEPS:
        reject(node, f"{node.target}: {layers} layer(s) x {dirs} direction(s) x {steps} steps is past "
                     f"{MAX_STEPS} unrolled steps")
        return None
    hx = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    per = len(params) // (layers * dirs)
    if per * layers * dirs != len(params) or per not in ((4, 5) if has_biases else (2, 3)):
        return None
    weights = [params[i * per:(i + 1) * per] for i in range(layers * dirs)]
    if any(const_value(gm, p) is None for p in params):
        return None
    b = _Cells(gm, node)
    time = 1 if batch_first else 0
    zero = [_is_zero(gm, s) for s in hx]
    out, finals = x, []
    for layer in range(layers):
        outs = []
        for d in range(dirs):
            idx = layer * dirs + d
            w = weights[idx]
            w_ih, w_hh = w[0], w[1]
            w_hr = w[-1] if per in (3, 5) else None
            size = const_value(gm, w_hh).shape[0] // GATES[kind]
            bias, b_hn = None, None
            if has_biases:
                b_ih, b_hh = const_value(gm, w[2]), const_value(gm, w[3])
                if kind == "gru":
                    b_hn = torch.cat([torch.zeros(2 * size), b_hh[2 * size:]])
                    bias = b.const(f"l{idx}_bias", b_ih + b_hh - b_hn)
                    b_hn = b.const(f"l{idx}_b_hn", b_hn) if bool(b_hn.any()) else None
                else:
                    bias = b.const(f"l{idx}_bias", b_ih + b_hh)
            xp = b.linear(out, w_ih, bias)
            state = [None if z else b.call(aten.select.int, s, 0, idx) for s, z in zip(hx, zero)]
            h, c = state[0], (state[1] if kind == "lstm" else None)
            seq = [None] * steps
            for t in (range(steps) if d == 0 else reversed(range(steps))):
                xt = b.call(aten.select.int, xp, time, t)
                if kind == "lstm":
                    h, c = _lstm_step(b, xt, h, c, w_hh, w_hr, size)
                elif kind == "gru":
                    h = _gru_step(b, xt, h, w_hh, b_hn, size)
                else:
                    h = b.call(aten.tanh.default if kind == "tanh" else aten.relu.default,
                               b.add(xt, b.linear(h, w_hh)))
                seq[t] = h
            outs.append(b.call(aten.cat.default, [b.call(aten.unsqueeze.default, s, time) for s in seq], time))
            finals.append((h, c))
        out = outs[0] if dirs == 1 else b.call(aten.cat.default, outs, 2)
    results = {0: out, 1: b.call(aten.cat.default, [b.call(aten.unsqueeze.default, h, 0) for h, _ in finals], 0)}
    if kind == "lstm":
        results[2] = b.call(aten.cat.default, [b.call(aten.unsqueeze.default, c, 0) for _, c in finals], 0)
    return results


def _rewrite_cell(gm: GraphModule, node: Node) -> dict | Node | None:
    """One step of nn.LSTMCell / GRUCell / RNNCell (a decoder's loop body): the step above, its
    input projection with both biases (GRU: but b_hn) folded."""
    kind = CELLS[node.target]
    x, hx, w_ih, w_hh = node.args[:4]
    biases = [a for a in node.args[4:6] if a is not None]
    if any(const_value(gm, w) is None for w in (w_ih, w_hh, *biases)) or len(biases) == 1:
        return None
    b = _Cells(gm, node)
    size = const_value(gm, w_hh).shape[0] // GATES[kind]
    state = [None if _is_zero(gm, s) else s for s in (list(hx) if kind == "lstm" else [hx])]
    bias = b_hn = None
    if biases:
        b_ih, b_hh = (const_value(gm, a) for a in biases)
        if kind == "gru":
            b_hn = torch.cat([torch.zeros(2 * size), b_hh[2 * size:]])
            bias = b.const("bias", b_ih + b_hh - b_hn)
            b_hn = b.const("b_hn", b_hn) if bool(b_hn.any()) else None
        else:
            bias = b.const("bias", b_ih + b_hh)
    xt = b.linear(x, w_ih, bias)
    if kind == "lstm":
        h, c = _lstm_step(b, xt, state[0], state[1], w_hh, None, size)
        return {0: h, 1: c}
    if kind == "gru":
        return _gru_step(b, xt, state[0], w_hh, b_hn, size)
    return b.call(aten.tanh.default if kind == "tanh" else aten.relu.default, b.add(xt, b.linear(state[0], w_hh)))


def unroll_rnn(gm: GraphModule) -> bool:
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in RNNS and node.target not in CELLS:
            continue
        one_output = node.target in CELLS and node.target != aten.lstm_cell.default
        if not one_output and any(u.op != "call_function" or u.target is not operator.getitem for u in node.users):
            continue
        results = (_rewrite if node.target in RNNS else _rewrite_cell)(gm, node)
        if results is None:
            continue
        if one_output:
            node.replace_all_uses_with(results)
        for user in list(node.users):
            user.replace_all_uses_with(results[user.args[1]])
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        changed = True
    return finish(gm, changed)
