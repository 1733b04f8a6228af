"""Dynamic shapes through vkq.compile(..., dynamic_shapes=...): a CNN with dynamic batch, height
and width and a BERT-style encoder with dynamic batch and sequence length, each compiled once
and called at many shapes, agree with the programs compiled statically for those shapes from
the same quantized graph; out-of-bounds shapes are refused naming the dimension."""
import numpy as np
import pytest

# -- through lowering: vkq.compile(..., dynamic_shapes=...) ----------------------------------------

def _compile_both(model, example, calib, scheme, dynamic_shapes):
    """(dynamic CompiledProgram, a function making the static program for some inputs from the
    same converted graph, i.e. the same quantization)."""
    import vkq
    from vkq.lower import lower
    gm = vkq.quantize(model, example, calib, scheme, dynamic_shapes=dynamic_shapes)
    float_linear = scheme if scheme in ("dynamic", "weight_only") else "dynamic"
    dyn = vkq.CompiledProgram(lower(gm, example, float_linear=float_linear, dynamic_shapes=dynamic_shapes))
    static = lambda *xs: vkq.CompiledProgram(lower(gm, xs, float_linear=float_linear, static=True))
    return dyn, static


class SmallCNN:
    @staticmethod
    def make():
        import torch
        torch.manual_seed(0)
        n = torch.nn

        class Block(n.Module):
            def __init__(self):
                super().__init__()
                self.a = n.Sequential(n.Conv2d(16, 16, 3, padding=1), n.BatchNorm2d(16), n.ReLU())
                self.b = n.Sequential(n.Conv2d(16, 16, 3, padding=1), n.BatchNorm2d(16))

            def forward(self, x):
                return torch.relu(x + self.b(self.a(x)))

        return n.Sequential(n.Conv2d(3, 16, 3, stride=2, padding=1), n.BatchNorm2d(16), n.ReLU(), Block(),
                            n.Conv2d(16, 24, 3, stride=2, padding=1), n.ReLU(), n.AdaptiveAvgPool2d(1),
                            n.Flatten(), n.Linear(24, 10)).eval()


CNN_SHAPES = [(1, 3, 32, 32), (3, 3, 17, 29), (2, 3, 64, 40), (5, 3, 13, 13), (1, 3, 61, 9)]


@pytest.fixture(scope="module")
def dynamic_cnn():
    import torch
    from torch.export import Dim
    model = SmallCNN.make()
    ds = ({0: Dim("batch", min=1, max=8), 2: Dim("height", min=9, max=64), 3: Dim("width", min=9, max=64)},)
    calib = [torch.randn(s) for s in [(4, 3, 32, 32), (2, 3, 48, 24), (1, 3, 64, 64), (3, 3, 16, 40)]]
    return _compile_both(model, (torch.randn(2, 3, 32, 32),), calib, "static", ds)


def test_cnn_compiled_once_runs_every_shape(device, dynamic_cnn, tmp_path):
    """A CNN compiled once with dynamic batch, height and width equals, bit for bit, the program
    compiled statically for each shape (same quantization), in one process, and from its saved
    .vkq through `vkq run` without torch."""
    import torch
    from oputil import run_cli_without_torch
    dyn, static = dynamic_cnn
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [] and set(prog.program.symbols.values()) == {(1, 8), (9, 64)}
    path = prog.save(tmp_path / "cnn.vkq")
    for i, shape in enumerate(CNN_SHAPES):
        x = torch.randn(shape).numpy()
        y = prog(x)
        want = vkq_on(static(torch.from_numpy(x)), device)(x)
        np.testing.assert_array_equal(y, want)
        if i < 3:
            np.save(tmp_path / "x.npy", x)
            res = run_cli_without_torch("run", path, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
                                        "--device", device.info.name)
            assert res.returncode == 0, res.stderr
            np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), y)
    with pytest.raises(ValueError, match=r"dimension 2 \(height\) must be in \[9, 64\], got 65"):
        prog(np.zeros((1, 3, 65, 20), np.float32))
    with pytest.raises(ValueError, match=r"dimension 0 \(batch\) must be in \[1, 8\], got 9"):
        prog(np.zeros((9, 3, 20, 20), np.float32))


def vkq_on(compiled, device):
    import vkq
    return vkq.CompiledProgram(compiled.program, device)


@pytest.fixture(scope="module")
def dynamic_bert():
    import torch
    from torch.export import Dim
    from transformers import BertConfig, BertModel
    from vkq.transformer import MeanPooledEncoder
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=48, max_position_embeddings=64)
    model = MeanPooledEncoder(BertModel(cfg).eval()).eval()
    B, L = Dim("batch", min=1, max=6), Dim("seq", min=2, max=40)
    ds = ({0: B, 1: L}, {0: B, 1: L})
    ids = torch.randint(0, 97, (2, 9))
    return _compile_both(model, (ids, torch.ones_like(ids)), None, "dynamic", ds)


BERT_SHAPES = [(1, 5), (3, 17), (2, 40), (6, 2), (4, 11)]


def test_bert_encoder_compiled_once_runs_every_shape(device, dynamic_bert, tmp_path):
    """A BERT-style encoder compiled once with dynamic batch and sequence length: every shape
    agrees with the program compiled statically for it to float rounding, padded positions
    included (a mask with zeros), and out-of-bounds shapes are refused. All of it on Vulkan:
    the positions (arange) and transformers' padding mask gathered at arange indices (index)
    ran through torch before, so the saved .vkq needed torch; it runs without it now."""
    import torch
    from oputil import run_cli_without_torch
    dyn, static = dynamic_bert
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [] and {"arange", "index"} <= {n.op for n in prog.program.nodes}
    path = prog.save(tmp_path / "bert.vkq")
    rng = np.random.default_rng(0)
    for i, (b, l) in enumerate(BERT_SHAPES):
        ids = rng.integers(0, 97, (b, l)).astype(np.int64)
        mask = np.ones((b, l), np.int64)
        mask[0, l // 2 + 1:] = 0
        y = prog(ids, mask)
        want = vkq_on(static(torch.from_numpy(ids), torch.from_numpy(mask)), device)(ids, mask)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, prog.run_reference(ids, mask), rtol=1e-4, atol=1e-5)
        if i == 1:
            np.save(tmp_path / "ids.npy", ids)
            np.save(tmp_path / "mask.npy", mask)
            res = run_cli_without_torch("run", path, "--input", tmp_path / "ids.npy", "--input", tmp_path / "mask.npy",
                                        "--output", tmp_path / "y.npy", "--device", device.info.name)
            assert res.returncode == 0, res.stderr[-3000:]
            np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), y)
    with pytest.raises(ValueError, match=r"dimension 1 \(seq\) must be in \[2, 40\], got 41"):
        prog(np.zeros((1, 41), np.int64), np.ones((1, 41), np.int64))
    with pytest.raises(ValueError, match="both are batch and must agree"):
        prog(np.zeros((2, 5), np.int64), np.ones((3, 5), np.int64))


class MeanHeadCNN:
    """Global pooling spelled as mean over H and W, as ConvNeXt and many timm heads write it: one
    mean without keepdim before the classifier, one with keepdim feeding a 1x1 conv (a squeeze-
    excitation gate). normalize_ops makes each an adaptive_avg_pool2d, a node the exported graph
    has no shape for."""
    @staticmethod
    def make():
        import torch
        torch.manual_seed(0)
        n = torch.nn

        class Net(n.Module):
            def __init__(self):
                super().__init__()
                self.stem = n.Sequential(n.Conv2d(3, 12, 3, stride=2, padding=1), n.ReLU())
                self.gate = n.Conv2d(12, 12, 1)
                self.fc = n.Linear(12, 7)

            def forward(self, x):
                x = self.stem(x)
                x = x * torch.sigmoid(self.gate(x.mean((2, 3), keepdim=True)))
                return self.fc(x.mean((-2, -1)))

        return Net().eval()


def test_mean_over_height_and_width_with_dynamic_dims(device):
    """Both means compile with dynamic batch, height and width (they were refused: 'vkq cannot
    tell how its shape follows the inputs' dynamic dims') and equal the static programs."""
    import torch
    from torch.export import Dim
    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("height", min=8, max=48), 3: Dim("width", min=8, max=48)},)
    calib = [torch.randn(s) for s in [(2, 3, 32, 32), (1, 3, 48, 20), (3, 3, 16, 40)]]
    dyn, static = _compile_both(MeanHeadCNN.make(), (torch.randn(2, 3, 24, 30),), calib, "static", ds)
    prog = vkq_on(dyn, device)
    assert set(prog.program.symbols.values()) == {(1, 4), (8, 48)}
    outs = []
    for shape in [(1, 3, 8, 47), (4, 3, 33, 12), (3, 3, 48, 48)]:
        x = torch.randn(shape).numpy()
        y = prog(x)
        assert y.shape == (shape[0], 7)
        np.testing.assert_array_equal(y, vkq_on(static(torch.from_numpy(x)), device)(x))
        outs.append(y)
    assert len(np.unique(np.concatenate([o.ravel() for o in outs]))) > 20


class RelativeEncoder:
    """transformers' T5 encoder and DeBERTa-v2 in small configurations, with a padding mask:
    both compute relative position buckets from the sequence length in int64 arithmetic (abs,
    sign, min, a true division, a log), and DeBERTa repeats its relative embeddings batch times."""
    @staticmethod
    def make(kind):
        import torch
        import transformers as tf

        class Masked(torch.nn.Module):
            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, ids, mask):
                return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            if kind == "t5":
                cfg = tf.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                  relative_attention_num_buckets=16, relative_attention_max_distance=24)
                return Masked(tf.T5EncoderModel(cfg)).eval()
            cfg = tf.DebertaV2Config(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32, relative_attention=True,
                                     pos_att_type=["p2c", "c2p"], position_buckets=8, max_relative_positions=16)
            return Masked(tf.DebertaV2Model(cfg)).eval()


@pytest.mark.parametrize("kind", ["t5", "deberta"])
def test_relative_position_buckets_with_dynamic_batch_and_length_run_on_vulkan(device, kind):
    """T5's and DeBERTa's relative position buckets at a dynamic length: int abs and sign (no
    kernel), min.other (no rule), an int64 true division (no rule) and DeBERTa's repeat by
    batch // heads (a count the graph computes) each ran on the CPU. Now the whole encoder runs
    on Vulkan, equal to the program compiled statically at each shape, padded positions too."""
    import torch
    from torch.export import Dim
    B, L = Dim("batch", min=1, max=4), Dim("seq", min=2, max=30)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 100, (2, 11), generator=g)
    dyn, static = _compile_both(RelativeEncoder.make(kind), (ids, torch.ones_like(ids)),
                                [(torch.randint(3, 100, (2, 11), generator=g), torch.ones_like(ids))],
                                "dynamic", ({0: B, 1: L}, {0: B, 1: L}))
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [], prog.fallback_ops
    ops = {n.op for n in prog.program.nodes}
    assert ({"abs", "minimum"} if kind == "t5" else {"abs", "sign", "log", "remap"}) <= ops, ops
    rng = np.random.default_rng(1)
    for b, l in [(1, 5), (3, 17), (4, 30)]:
        x = rng.integers(3, 100, (b, l)).astype(np.int64)
        mask = np.ones((b, l), np.int64)
        mask[0, l // 2 + 1:] = 0
        y = prog(x, mask)
        want = vkq_on(static(torch.from_numpy(x), torch.from_numpy(mask)), device)(x, mask)
        assert y.shape == (b, l, 32) and np.abs(y).max() > 0.1
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=2e-5)


def test_dinov2_at_dynamic_resolutions_and_a_branch_export_fixed_refused_naming_its_guard(device):
    """transformers' DINOv2 interpolates its position embeddings to the patch grid, whose size
    is h**2-like in torch's expressions (refused before: no power in vkq.symbolic). At the
    config's own size it skips the interpolation, and torch.export keeps that branch as a guard
    (patches == 16): compiled from such an example the graph holds at that size only, refused
    naming the guard; from an example of another size, one program runs every other resolution,
    and refuses the config's own, naming the guard (Program.checks: it would interpolate where
    the model does not)."""
    import torch
    import transformers as tf
    from torch.export import Dim
    from vkq.dynamic import DynamicShapeError

    class Dino(torch.nn.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.model = tf.Dinov2Model(tf.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                            intermediate_size=64, image_size=32, patch_size=8))

        def forward(self, x):
            return self.model(pixel_values=x).last_hidden_state

    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("h", min=1, max=12) * 8, 3: Dim("w", min=1, max=12) * 8},)
    g = torch.Generator().manual_seed(0)
    with pytest.raises(DynamicShapeError, match=r"torch.export's graph holds only where x.size\(\)\[3\] // 8 \* "
                                                r"\(x.size\(\)\[2\] // 8\) == 16 .* these dims cannot be dynamic"):
        _compile_both(Dino().eval(), (torch.randn(2, 3, 32, 32, generator=g),), None, "dynamic", ds)
    dyn, static = _compile_both(Dino().eval(), (torch.randn(2, 3, 40, 48, generator=g),), None, "dynamic", ds)
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [], prog.fallback_ops
    assert "upsample_bicubic2d" in {n.op for n in prog.program.nodes}
    for shape in [(1, 3, 56, 24), (3, 3, 96, 88)]:
        x = torch.randn(shape, generator=g).numpy()
        y = prog(x)
        assert y.shape == (shape[0], 1 + shape[2] // 8 * (shape[3] // 8), 32) and np.abs(y).max() > 0.1
        np.testing.assert_allclose(y, vkq_on(static(torch.from_numpy(x)), device)(x), rtol=1e-4, atol=2e-5)
    # at the config's own grid the model skips the interpolation: export's guard, now a check
    assert "s" in prog.program.checks[0] and "16" in prog.program.checks[0]
    with pytest.raises(ValueError, match=r"give h \(s\d+\) = 4, w \(s\d+\) = 4, where the program does not hold: "
                                         r"torch.export traced the model under h\*w != 16"):
        prog(np.zeros((1, 3, 32, 32), np.float32))


def _conv_with_a_size_branch(taken, then, seed):
    """A seeded 3 -> 8 conv (+ relu) whose forward applies `then` where taken(h, w): a Python
    branch on the input's size, which torch.export keeps as a guard."""
    import torch

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            if taken(x.shape[2], x.shape[3]):
                y = then(y)
            return torch.relu(y)

    return Branchy().eval()


def test_a_branch_on_the_input_size_is_checked_when_the_program_runs(device):
    """A model that takes another path at some sizes (here where h + w == 27): torch.export
    traces the example's path and keeps the condition as a guard, which its ep.module() checks
    and vkq kept nowhere (drop_guards): the program computed the traced path at every size.
    Now the guard is a Program check: sizes where it fails are refused naming it, and verify's
    probe size (the example's + 1, 13 x 14, is such a size) moves on to one where it holds."""
    import torch
    from torch.export import Dim
    model = _conv_with_a_size_branch(lambda h, w: h + w == 27, lambda y: y * 2, seed=0)
    ds = ({0: Dim("batch", min=1, max=3), 2: Dim("h", min=4, max=24), 3: Dim("w", min=4, max=24)},)
    g = torch.Generator().manual_seed(0)
    calib = [(torch.randn(2, 3, 12, 13, generator=g),)]
    dyn, static = _compile_both(model, calib[0], calib, "static", ds)
    prog = vkq_on(dyn, device)
    assert len(prog.program.checks) == 1 and prog.program.checks[0].endswith("!= 27"), prog.program.checks
    for shape in [(1, 3, 13, 15), (3, 3, 24, 4), (2, 3, 12, 13)]:
        x = torch.randn(shape, generator=g).numpy()
        np.testing.assert_array_equal(prog(x), vkq_on(static(torch.from_numpy(x)), device)(x))
    with pytest.raises(ValueError, match=r"give h \(s\d+\) = 13, w \(s\d+\) = 14, where the program does not hold: "
                                         r"torch.export traced the model under (h \+ w|w \+ h) != 27"):
        prog(np.zeros((1, 3, 13, 14), np.float32))


def test_a_guard_on_the_smaller_side_compiles_probing_below_the_example(device):
    """Swin's rule (a window no larger than the map: min(h, w) <= 16 here, compiled at the
    bound 16 x 24): verify's usual probe, every dim + 1, fails the guard; the probe that moves
    h down and w up holds, so the model compiles, runs where min(h, w) <= 16, and refuses the
    other path naming it."""
    import torch
    from torch.export import Dim
    model = _conv_with_a_size_branch(lambda h, w: min(h, w) > 16,
                                     lambda y: torch.nn.functional.avg_pool2d(y, 3, 1, 1), seed=1)

    ds = ({2: Dim("h", min=4, max=32), 3: Dim("w", min=4, max=32)},)
    example = (torch.randn(1, 3, 16, 24, generator=torch.Generator().manual_seed(0)),)
    dyn, static = _compile_both(model, example, [example], "static", ds)
    prog = vkq_on(dyn, device)
    for shape in [(1, 3, 5, 32), (1, 3, 32, 16), (1, 3, 16, 16)]:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))).numpy()
        np.testing.assert_array_equal(prog(x), vkq_on(static(torch.from_numpy(x)), device)(x))
    with pytest.raises(ValueError, match=r"give h \(s\d+\) = 17, w \(s\d+\) = 20, where .* "
                                         r"under Min\((h, w|w, h)\) <= 16"):
        prog(np.zeros((1, 3, 17, 20), np.float32))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_computed_indices_and_diffs_with_dynamic_batch_and_length(device, scheme):
    """Parts of CLIP's and Whisper's text paths at a dynamic batch and length: a position table
    read at arange(t) (weight[positions]), the pooled token x[arange(b), ids.argmax(-1)], and
    transformers' packed-sequence check, diff(positions, prepend=positions[:, :1] - 1) on int64.
    The first two were lowered to an embedding whose table and flat index were made for one size
    (refused: "vkq cannot tell how its shape ... follows"); the diff with a prepend ran on the CPU.
    All on Vulkan now, equal to the static programs at every shape."""
    import torch
    from torch.export import Dim
    n = torch.nn

    class TextPath(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.emb, self.pos, self.lin = n.Embedding(50, 16), n.Parameter(torch.randn(40, 16)), n.Linear(16, 16)

        def forward(self, ids):
            positions = torch.arange(ids.shape[1]).expand(ids.shape[0], -1) * 2
            steps = torch.diff(positions, prepend=positions[:, :1] - 1, dim=-1)
            h = torch.relu(self.lin(self.emb(ids) + self.pos[torch.arange(ids.shape[1])]))
            return h[torch.arange(ids.shape[0]), ids.argmax(-1)], steps

    B, L = Dim("batch", min=1, max=4), Dim("seq", min=2, max=30)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (2, 11), generator=g)
    dyn, static = _compile_both(TextPath().eval(), (ids,), [torch.randint(0, 50, (2, 11), generator=g)], scheme,
                                ({0: B, 1: L},))
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [], prog.fallback_ops
    for b, l in [(1, 5), (3, 17), (4, 30)]:
        x = torch.randint(0, 50, (b, l), generator=g).numpy()
        pooled, steps = prog(x)
        assert pooled.shape == (b, 16) and np.abs(pooled).max() > 0.1
        np.testing.assert_array_equal(steps, np.concatenate([np.ones((b, 1)), np.full((b, l - 1), 2)], 1))
        want = vkq_on(static(torch.from_numpy(x)), device)(x)
        np.testing.assert_array_equal(steps, want[1])
        if scheme == "static":
            np.testing.assert_array_equal(pooled, want[0])
        else:
            np.testing.assert_allclose(pooled, want[0], rtol=1e-5, atol=1e-6)


class TokenTransformer:
    """A ViT/decoder-style block on float tokens, as models write one: a class token expanded to
    the batch and concatenated, positions sliced to the length, attention whose heads are split
    by view/transpose and merged by transpose/reshape, key/value heads widened by
    repeat_interleave, and a causal boolean mask built from the length (ones(n, n).triu(1))."""
    @staticmethod
    def make():
        import torch
        torch.manual_seed(0)
        n = torch.nn

        class Net(n.Module):
            def __init__(self, d=16, heads=4, kv=2):
                super().__init__()
                self.h, self.kv, self.hd = heads, kv, d // heads
                self.cls, self.pos = n.Parameter(torch.randn(1, 1, d)), n.Parameter(0.1 * torch.randn(1, 40, d))
                self.q, self.o = n.Linear(d, d), n.Linear(d, d)
                self.k, self.v = n.Linear(d, kv * self.hd), n.Linear(d, kv * self.hd)
                self.mha, self.fc = n.MultiheadAttention(d, 2, batch_first=True), n.Linear(d, 5)

            def forward(self, x):
                b, t, d = x.shape
                q = self.q(x).view(b, t, self.h, self.hd).transpose(1, 2)
                k, v = (f(x).view(b, t, self.kv, self.hd).transpose(1, 2).repeat_interleave(self.h // self.kv, 1)
                        for f in (self.k, self.v))
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
                x = torch.cat([self.cls.expand(b, -1, -1), x], 1) + self.pos[:, :t + 1]
                mask = torch.ones(t + 1, t + 1, dtype=torch.bool).triu(1)
                x = x + self.mha(x, x, x, need_weights=False, attn_mask=mask)[0]
                return self.fc(x[:, 0])

        return Net().eval()


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_token_transformer_with_dynamic_batch_and_length(device, scheme):
    """Each of these was refused with a dynamic length or failed: lift_quantize put the int8
    copy of a view before the sym_size it reads (a graph out of order), the int8 transpose
    before the head merge had no symbolic shape of its own (guessed wrong, refused by verify),
    the zeros_like that turns the causal mask into floats was folded to a constant of the
    example's length, and repeat_interleave became a reshape naming two dynamic sizes. Equal to
    the static programs at every shape (static scheme: bit for bit)."""
    import torch
    from torch.export import Dim
    ds = ({0: Dim("batch", min=1, max=4), 1: Dim("length", min=2, max=39)},)
    calib = [torch.randn(s) for s in [(2, 12, 16), (1, 39, 16), (3, 5, 16)]]
    dyn, static = _compile_both(TokenTransformer.make(), (torch.randn(2, 9, 16),), calib, scheme, ds)
    prog = vkq_on(dyn, device)
    # the mask made from the length (ones, triu, the zeros_like turning it into floats) runs on
    # Vulkan too (vkq/ops/creation.py; it ran through torch before): nothing on the CPU
    assert prog.fallback_ops == [] and not any(n.op == "torch_op" for n in prog.program.nodes)
    for shape in [(1, 2, 16), (4, 23, 16), (3, 39, 16)]:
        x = torch.randn(shape).numpy()
        y, want = prog(x), vkq_on(static(torch.from_numpy(x)), device)(x)
        assert y.shape == (shape[0], 5)
        if scheme == "static":
            np.testing.assert_array_equal(y, want)
        else:
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)



class RotaryDecoder:
    """A Llama/GPT-NeoX-style decoder block on token ids: rotary positions made from the length
    (arange, outer with the inverse frequencies, cos / sin), a causal mask from ones(L, L).tril()
    and a float bias from full(-inf).triu(1), an RWKV-style token shift padded with new_zeros.
    With a dynamic length every one of those is built at run time."""
    @staticmethod
    def make():
        import torch
        torch.manual_seed(0)
        n = torch.nn

        class Net(n.Module):
            def __init__(self, vocab=41, d=16, heads=2):
                super().__init__()
                self.h, self.hd = heads, d // heads
                self.emb, self.qkv, self.o = n.Embedding(vocab, d), n.Linear(d, 3 * d), n.Linear(d, d)
                self.mlp, self.head = n.Sequential(n.Linear(d, 32), n.GELU(), n.Linear(32, d)), n.Linear(d, vocab)
                self.register_buffer("inv", 1.0 / 10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))

            def rope(self, t, cos, sin):
                a, b = t.chunk(2, -1)
                return t * cos + torch.cat([-b, a], -1) * sin

            def forward(self, ids):
                b, t = ids.shape
                x = self.emb(ids)
                x = x + 0.5 * torch.cat([x.new_zeros(b, 1, x.shape[-1]), x[:, :-1]], 1)
                f = torch.outer(torch.arange(t).float(), self.inv)
                cos, sin = torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()
                q, k, v = self.qkv(x).view(b, t, 3, self.h, self.hd).permute(2, 0, 3, 1, 4)
                q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
                att = (q @ k.transpose(-1, -2)) / self.hd ** 0.5 + torch.full((t, t), float("-inf")).triu(1)
                att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).tril().logical_not(), -1e9).softmax(-1)
                x = x + self.o((att @ v).transpose(1, 2).reshape(b, t, -1))
                return self.head(x + self.mlp(x))

        return Net().eval()


def test_rotary_decoder_builds_its_positions_and_masks_on_vulkan(device, tmp_path):
    """The tensors a decoder makes from its length (arange, full, ones, new_zeros, tril, triu,
    outer) ran through torch on the CPU with a dynamic length, so its .vkq needed torch to run.
    Now all of it is Vulkan: the same logits as the static program at every length, the float
    model's to float rounding, and from the saved file through `vkq run` without torch."""
    import torch
    from torch.export import Dim
    from oputil import run_cli_without_torch
    model = RotaryDecoder.make()
    ds = ({0: Dim("batch", min=1, max=3), 1: Dim("length", min=3, max=33)},)
    dyn, static = _compile_both(model, (torch.randint(0, 41, (2, 9)),), None, "dynamic", ds)
    prog = vkq_on(dyn, device)
    ops = {n.op for n in prog.program.nodes}
    assert prog.fallback_ops == [] and "torch_op" not in ops, prog.fallback_ops
    assert {"arange", "full", "tril", "triu"} <= ops
    path = prog.save(tmp_path / "decoder.vkq")
    rng = np.random.default_rng(3)
    for i, (b, t) in enumerate([(1, 3), (3, 17), (2, 33), (1, 6)]):
        ids = rng.integers(0, 41, (b, t)).astype(np.int64)
        y = prog(ids)
        np.testing.assert_allclose(y, vkq_on(static(torch.from_numpy(ids)), device)(ids), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(y, prog.run_reference(ids), rtol=1e-4, atol=1e-4)
        with torch.no_grad():
            want = model(torch.from_numpy(ids)).numpy()
        assert y.shape == want.shape and np.corrcoef(y.ravel(), want.ravel())[0, 1] > 0.99
        if i < 2:
            np.save(tmp_path / "ids.npy", ids)
            res = run_cli_without_torch("run", path, "--input", tmp_path / "ids.npy", "--output",
                                        tmp_path / "y.npy", "--device", device.info.name)
            assert res.returncode == 0, res.stderr[-3000:]
            np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), y)



@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_einsum_attention_with_dynamic_batch_and_length(device, scheme):
    """Attention written with einsum ("bihd,bjhd->bhij"): normalize_ops inlines torch's own
    decomposition, which with dynamic dims reads them with sym_size (it was left to torch on
    the CPU); and an int8 view that lift_quantize made and views_to_repack turned into a repack
    lost the exported node its shape came from, so the compile failed ("cannot tell how its
    shape follows the inputs' dynamic dims"). Equal to the static programs at every shape."""
    import torch
    from torch.export import Dim
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self, d=16, h=2):
            super().__init__()
            self.qkv, self.o, self.h = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d), h

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(x).view(b, t, 3, self.h, d // self.h).unbind(2)
            att = torch.einsum("bihd,bjhd->bhij", q, k).softmax(-1)
            return self.o(torch.einsum("bhij,bjhd->bihd", att, v).reshape(b, t, d))

    ds = ({0: Dim("batch", min=1, max=4), 1: Dim("length", min=2, max=40)},)
    calib = [torch.randn(s) for s in [(2, 9, 16), (1, 40, 16), (3, 5, 16)]]
    dyn, static = _compile_both(Net().eval(), (torch.randn(2, 9, 16),), calib, scheme, ds)
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [] and "bmm" in {n.op for n in prog.program.nodes}
    for shape in [(1, 2, 16), (4, 31, 16), (3, 40, 16)]:
        x = torch.randn(shape).numpy()
        y, want = prog(x), vkq_on(static(torch.from_numpy(x)), device)(x)
        if scheme == "static":
            np.testing.assert_array_equal(y, want)
        else:
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


class FPN:
    """A feature-pyramid head: two stride-2 convs, the coarse map upsampled by 2 (nearest) and
    added to a lateral 1x1 conv of the finer one, the sum upsampled by 2 (bilinear)."""
    @staticmethod
    def make():
        import torch
        torch.manual_seed(0)
        n = torch.nn

        class Net(n.Module):
            def __init__(self):
                super().__init__()
                self.c1, self.c2 = n.Conv2d(3, 8, 3, 2, 1), n.Conv2d(8, 8, 3, 2, 1)
                self.lat, self.out = n.Conv2d(8, 8, 1), n.Conv2d(8, 4, 3, padding=1)

            def forward(self, x):
                a = torch.relu(self.c1(x))
                y = self.lat(a) + n.functional.interpolate(torch.relu(self.c2(a)), scale_factor=2, mode="nearest")
                return n.functional.interpolate(self.out(y), scale_factor=2, mode="bilinear")

        return Net().eval()


def test_fpn_upsampling_with_dynamic_height_and_width(device):
    """Upsampling by whole scale factors keeps the dims symbolic (vkq.dynamic runs it as input
    size x factor; torch's rule int(size * 2.0) fixed them: refused), nearest upsampling makes its
    index map per shape (a take's was a constant for one size), bilinear keeps no output size;
    the input's height and width are derived dims (4 x a Dim: the pyramid needs multiples of 4),
    which vkq binds by solving 4*s = size. Bit for bit the static programs at every shape, and
    a size that is not a multiple of 4 is refused naming the dim."""
    import torch
    from torch.export import Dim
    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("h4", min=2, max=16) * 4, 3: Dim("w4", min=2, max=16) * 4},)
    calib = [torch.randn(s) for s in [(2, 3, 32, 32), (1, 3, 48, 20), (3, 3, 16, 40)]]
    dyn, static = _compile_both(FPN.make(), (torch.randn(2, 3, 24, 32),), calib, "static", ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback, prog.program.fallback
    ops = [n.op for n in prog.program.nodes]
    assert "upsample_nearest2d" in ops and "upsample_bilinear2d" in ops, ops
    for shape in [(1, 3, 8, 60), (4, 3, 32, 12), (3, 3, 64, 64)]:
        x = torch.randn(shape).numpy()
        y = prog(x)
        assert y.shape == (shape[0], 4, shape[2], shape[3])
        np.testing.assert_array_equal(y, vkq_on(static(torch.from_numpy(x)), device)(x))
    with pytest.raises(ValueError, match=r"input 'x' dimension 2 must be 4\*s\d+, got 30"):
        prog(torch.randn(1, 3, 30, 32).numpy())


def test_an_op_that_fixes_a_dynamic_dim_is_refused_naming_it():
    """Nearest upsampling by a fractional scale factor: torch computes its output size from the
    example's values (int(size * 1.5)), which fixes the batch and spatial dims while vkq traces
    the graph symbolically. The compile is refused there, naming the op and the dims (it used to
    fail later, naming an index constant). (Whole factors and 1/2^k are symbolic:
    test_fpn_upsampling_...; an even-kernel padding="same" conv, once refused here as its
    constant_pad_nd guarded on the batch, is traced by shape and runs at every length.)"""
    import torch
    from torch.export import Dim
    from vkq.dynamic import DynamicShapeError
    torch.manual_seed(0)
    n = torch.nn

    class Up(n.Module):
        def __init__(self):
            super().__init__()
            self.conv = n.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return n.functional.interpolate(torch.relu(self.conv(x)), scale_factor=1.5, mode="nearest")

    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("height", min=8, max=32), 3: Dim("width", min=8, max=32)},)
    with pytest.raises(DynamicShapeError, match=r"node 'upsample_nearest2d' \(aten.upsample_nearest2d.vec\) fixes "
                                                r"the dynamic x dim 0, x dim 2, x dim 3 to its example value"):
        _compile_both(Up().eval(), (torch.randn(2, 3, 16, 20),), [torch.randn(2, 3, 16, 20)], "static", ds)

    class SameEven(n.Module):
        def __init__(self):
            super().__init__()
            self.conv = n.Conv1d(4, 8, 4, padding="same")

        def forward(self, x):
            return torch.relu(self.conv(x))

    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("time", min=8, max=96)},)     # (once refused: traced by
    dyn, static = _compile_both(SameEven().eval(), (torch.randn(2, 4, 20),), [torch.randn(2, 4, 20)], "static", ds)
    for shape in [(1, 4, 9), (3, 4, 31)]:                                      # shape now, vkq.dynamic)
        x = torch.randn(shape).numpy()
        np.testing.assert_array_equal(dyn(x), static(torch.from_numpy(x))(x))

    class Pairs(n.Module):    # traced symbolically, but two index tensors pair dims 1 and 2: no map per
        def __init__(self):   # dim for `remap` (x[:, idx], repeat have one: test_picks_...), a take
            super().__init__()
            self.conv = n.Conv2d(3, 4, 3)

        def forward(self, x):
            return torch.relu(self.conv(x))[:, [2, 0, 1], [1, 3, 0]]

    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("height", min=8, max=32), 3: Dim("width", min=8, max=32)},)
    with pytest.raises(DynamicShapeError, match=r"node 'index' \(take\) reads constant '\w+', made for one input size "
                                                r".* this op cannot run with dynamic shapes yet"):
        _compile_both(Pairs().eval(), (torch.randn(2, 3, 16, 20),), [torch.randn(2, 3, 16, 20)], "static", ds)


class SpeechCNN:
    """1-D convs with padding="same" and a residual, over (batch, features, time)."""
    @staticmethod
    def make():
        import torch
        torch.manual_seed(0)
        n = torch.nn

        class Net(n.Module):
            def __init__(self):
                super().__init__()
                self.a = n.Sequential(n.Conv1d(10, 16, 5, padding="same"), n.BatchNorm1d(16), n.ReLU())
                self.b = n.Sequential(n.Conv1d(16, 16, 3, padding="same", dilation=2, groups=4), n.ReLU6())
                self.head = n.Sequential(n.AdaptiveAvgPool1d(1), n.Flatten(), n.Linear(16, 5))

            def forward(self, x):
                x = self.a(x)
                return self.head(x + self.b(x))

        return Net().eval()


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_one_d_convs_with_dynamic_batch_and_length(device, scheme):
    """A 1-D network (vkq runs it as 2-D on (N, C, 1, L)) compiled once with dynamic batch and
    time equals the static programs. Its padding="same" is rewritten before annotation without
    fixing the dynamic dims (the rank check read the shape as ints, which made both static).
    Under the dynamic scheme (float convs) its AdaptiveAvgPool1d(1) head ran through torch on
    the CPU; it is a mean over the time axis on Vulkan now."""
    import torch
    from torch.export import Dim
    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("time", min=8, max=96)},)
    calib = [torch.randn(s) for s in [(2, 10, 50), (1, 10, 96), (3, 10, 20)]]
    dyn, static = _compile_both(SpeechCNN.make(), (torch.randn(2, 10, 40),), calib, scheme, ds)
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [] and set(prog.program.symbols.values()) == {(1, 4), (8, 96)}
    assert sum(n.op == ("conv2d_q8" if scheme == "static" else "conv2d") for n in prog.program.nodes) == 2
    for shape in [(1, 10, 8), (4, 10, 95), (3, 10, 33)]:
        x = torch.randn(shape).numpy()
        y = prog(x)
        assert y.shape == (shape[0], 5)
        want = vkq_on(static(torch.from_numpy(x)), device)(x)
        if scheme == "static":
            np.testing.assert_array_equal(y, want)
        else:
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
@pytest.mark.parametrize("kind", ["text_cnn", "pyramid"])
def test_adaptive_max_pools_with_dynamic_sizes(device, scheme, kind):
    """A text CNN's max over time (AdaptiveMaxPool1d(1)) and a 3 x 3 AdaptiveMaxPool2d over a
    map of free size ran in float through torch on the CPU (the windows depend on the size). They
    are vkq.adaptive_max_pool2d now (normalize_ops), an int8 kernel under the static scheme, the
    float one (or a max over H and W) under the dynamic one: one program for every size, equal to
    the static programs (static scheme: bit for bit)."""
    import torch
    from torch.export import Dim
    torch.manual_seed(0)
    n = torch.nn
    one_d = kind == "text_cnn"
    conv = n.Conv1d if one_d else n.Conv2d

    class Net(n.Module):
        def __init__(self):
            super().__init__()
            self.conv = n.Sequential(conv(6, 12, 3, padding=1), n.ReLU())
            self.pool = n.AdaptiveMaxPool1d(1) if one_d else n.AdaptiveMaxPool2d(3)
            self.head = n.Linear(12 if one_d else 12 * 9, 5)

        def forward(self, x):
            return self.head(self.pool(self.conv(x)).flatten(1))

    if one_d:
        ds, example = ({0: Dim("batch", min=1, max=4), 2: Dim("time", min=4, max=80)},), (2, 6, 40)
        shapes = [(1, 6, 4), (4, 6, 79), (3, 6, 17)]
    else:
        ds, example = ({2: Dim("h", min=3, max=40), 3: Dim("w", min=3, max=40)},), (2, 6, 16, 16)
        shapes = [(2, 6, 3, 40), (2, 6, 31, 17), (2, 6, 10, 10)]
    calib = [torch.randn(s) for s in [example, shapes[1]]]
    dyn, static = _compile_both(Net().eval(), (torch.randn(example),), calib, scheme, ds)
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [], prog.fallback_ops
    pool = {"static": "adaptive_max_pool2d_q8", "dynamic": "amax" if one_d else "adaptive_max_pool2d"}[scheme]
    assert pool in [node.op for node in prog.program.nodes]
    for shape in shapes:
        x = torch.randn(shape).numpy()
        y = prog(x)
        assert y.shape == (shape[0], 5) and len(np.unique(y)) > 3
        want = vkq_on(static(torch.from_numpy(x)), device)(x)
        if scheme == "static":
            np.testing.assert_array_equal(y, want)
        else:
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_transposed_convs_with_dynamic_batch_and_size(device, scheme):
    """conv_transpose_as_conv's pixel shuffle is an index map made for one size: with a dynamic
    batch or map the transposed conv ran in float through torch on the CPU. The phases are now
    interleaved by views and a permute that read the sizes from the graph, and the crop is
    counted from both ends, so a decoder's ConvTranspose2d (stride 2 and 3, output padding,
    groups) and a 1-D one (under the float-conv scheme too) run on Vulkan at every size, equal
    to the static programs (static scheme: bit for bit)."""
    import torch
    from torch.export import Dim
    torch.manual_seed(0)
    n = torch.nn

    class Net(n.Module):
        def __init__(self):
            super().__init__()
            self.stem = n.Sequential(n.Conv2d(3, 8, 3, padding=1), n.ReLU())
            self.up2 = n.Sequential(n.ConvTranspose2d(8, 4, 4, 2, 1), n.ReLU())
            self.up3 = n.ConvTranspose2d(8, 4, 3, 3, 1, output_padding=1, groups=2)
            self.head = n.Conv2d(4, 2, 1)

        def forward(self, x):
            y = self.stem(x)
            return self.head(self.up2(y)), self.head(self.up3(y))

    model = Net().eval()
    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("height", min=4, max=24), 3: Dim("width", min=4, max=24)},)
    calib = [torch.randn(s) for s in [(2, 3, 12, 10), (1, 3, 24, 7)]]
    dyn, static = _compile_both(model, (torch.randn(2, 3, 12, 10),), calib, scheme, ds)
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [] and not any(nd.op == "torch_op" for nd in prog.program.nodes)
    for shape in [(1, 3, 12, 10), (3, 3, 5, 17), (2, 3, 24, 4)]:
        x = torch.randn(shape).numpy()
        got, want = prog(x), vkq_on(static(torch.from_numpy(x)), device)(x)
        assert got[0].shape == (shape[0], 2, 2 * shape[2], 2 * shape[3])
        assert got[1].shape == (shape[0], 2, 3 * shape[2] - 1, 3 * shape[3] - 1)
        for g, w in zip(got, want):
            if scheme == "static":
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)

    one_d = n.Sequential(n.Conv1d(3, 8, 3, padding=1), n.ReLU(), n.ConvTranspose1d(8, 4, 4, 2, 1), n.Conv1d(4, 2, 1)).eval()
    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("time", min=4, max=64)},)
    dyn, static = _compile_both(one_d, (torch.randn(2, 3, 17),), [torch.randn(2, 3, 17)], scheme, ds)
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == []
    for shape in [(1, 3, 9), (4, 3, 64)]:
        x = torch.randn(shape).numpy()
        got, want = prog(x), vkq_on(static(torch.from_numpy(x)), device)(x)
        assert got.shape == (shape[0], 2, 2 * shape[2])
        if scheme == "static":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_bicubic_and_grid_sample_with_dynamic_height_and_width(device, scheme):
    """A bicubic upsampling by 2 (its taps made per shape, as bilinear's) and a grid_sample at a
    grid the network predicts, on a map of free height and width: one program for every size,
    equal to the static programs (the static scheme bit for bit)."""
    import torch
    import torch.nn.functional as F
    from torch.export import Dim
    n = torch.nn

    class Warp(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.c, self.d = n.Conv2d(3, 8, 3, padding=1), n.Conv2d(8, 2, 3, padding=1)

        def forward(self, x):
            f = torch.relu(self.c(F.interpolate(x, scale_factor=2, mode="bicubic")))
            grid = self.d(f).permute(0, 2, 3, 1).tanh()
            return F.grid_sample(f, grid, padding_mode="border", align_corners=False).mean((2, 3))

    ds = ({2: Dim("h", min=4, max=40), 3: Dim("w", min=4, max=40)},)
    calib = [torch.randn(s) for s in [(1, 3, 12, 10), (1, 3, 17, 9)]]
    dyn, static = _compile_both(Warp().eval(), (torch.randn(1, 3, 12, 10),), calib, scheme, ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback, prog.program.fallback
    assert {"upsample_bicubic2d", "grid_sample"} <= {nd.op for nd in prog.program.nodes}
    for shape in [(1, 3, 12, 10), (1, 3, 5, 31), (1, 3, 23, 4)]:
        x = torch.randn(shape).numpy()
        y = prog(x)
        want = vkq_on(static(torch.from_numpy(x)), device)(x)
        assert y.shape == (1, 8) and np.abs(y).max() > 0.01
        if scheme == "static":
            np.testing.assert_array_equal(y, want)
        else:
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_reflect_replicate_circular_pads_flips_and_rolls_with_dynamic_height_and_width(device, scheme):
    """Reflect, replicate and circular padding (CycleGAN's and style-transfer nets' convs), a flip
    (test-time augmentation) and a roll: constant index maps for one size before, so such a net
    was refused with dynamic height and width; `remap` makes the map per shape now. One program,
    equal to the static programs at every size (the static scheme bit for bit), the takes of
    the static programs and the remaps of the dynamic one equal too."""
    import torch
    import torch.nn.functional as F
    from torch.export import Dim
    n = torch.nn

    class ImageToImage(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.c, self.d = n.Conv2d(3, 8, 3), n.Conv2d(8, 8, 3, padding=1, padding_mode="circular")
                self.e = n.Conv2d(8, 3, 3)

        def forward(self, x):
            h = torch.relu(self.c(F.pad(x, (1, 1, 1, 1), mode="reflect")))
            h = torch.relu(self.d(h)) + torch.roll(h, shifts=(2, -1), dims=(2, 3))
            return self.e(n.ReplicationPad2d((2, 0, 1, 1))(h)) + x.flip(-1)

    ds = ({2: Dim("h", min=4, max=48), 3: Dim("w", min=4, max=48)},)
    calib = [torch.randn(s) for s in [(1, 3, 12, 10), (1, 3, 17, 9)]]
    dyn, static = _compile_both(ImageToImage().eval(), (torch.randn(1, 3, 12, 10),), calib, scheme, ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback, prog.program.fallback
    assert sum(nd.op == "remap" for nd in prog.program.nodes) == 5, [nd.op for nd in prog.program.nodes]
    for shape in [(1, 3, 12, 10), (1, 3, 5, 31), (1, 3, 23, 4)]:
        x = torch.randn(shape).numpy()
        y = prog(x)
        fixed = vkq_on(static(torch.from_numpy(x)), device)
        assert "take" in {nd.op for nd in fixed.program.nodes}
        want = fixed(x)
        assert y.shape == shape and np.abs(y).max() > 0.01
        if scheme == "static":
            np.testing.assert_array_equal(y, want)
        else:
            np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_picks_and_tiles_by_constant_indices_with_dynamic_batch_height_and_width(device, scheme):
    """Constant indices along one dim (x[:, idx] with a buffer, an RGB -> BGR swap, index_select,
    the first positions of a flattened map) and repeat, also along a dynamic dim: a take's map was
    made for one size, so such nets were refused with dynamic shapes; each is a `remap` with a
    pick or tile per dim now, equal to the static programs at every size."""
    import torch
    from torch.export import Dim
    n = torch.nn

    class Picks(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.conv = n.Conv2d(3, 6, 3)
            self.register_buffer("order", torch.tensor([5, 0, 0, 2, 1]))

        def forward(self, x):
            h = torch.relu(self.conv(x[:, [2, 1, 0]]))[:, self.order]
            pairs = torch.index_select(h, 1, torch.tensor([4, 1])).repeat(1, 2, 1, 1)
            return pairs, h.repeat(2, 1, 1, 3), h.flatten(2)[:, :, [7, 0, 3]]

    ds = ({0: Dim("batch", min=1, max=4), 2: Dim("h", min=4, max=40), 3: Dim("w", min=4, max=40)},)
    calib = [torch.randn(s) for s in [(2, 3, 12, 10), (1, 3, 17, 9)]]
    dyn, static = _compile_both(Picks().eval(), (torch.randn(2, 3, 12, 10),), calib, scheme, ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback, prog.program.fallback
    maps = sorted(str(nd.attrs["dims"]) for nd in prog.program.nodes if nd.op == "remap")
    assert maps == sorted(str(m) for m in [
        [["keep"], ["pick", 2, 1, 0], ["keep"], ["keep"]], [["keep"], ["pick", 5, 0, 0, 2, 1], ["keep"], ["keep"]],
        [["keep"], ["pick", 4, 1], ["keep"], ["keep"]], [["keep"], ["tile", 2], ["keep"], ["keep"]],
        [["tile", 2], ["keep"], ["keep"], ["tile", 3]], [["keep"], ["keep"], ["pick", 7, 0, 3]]]), maps
    for shape in [(2, 3, 12, 10), (1, 3, 5, 31), (3, 3, 23, 4)]:
        x = torch.randn(shape).numpy()
        got = prog(x)
        fixed = vkq_on(static(torch.from_numpy(x)), device)
        b, h, w = shape[0], shape[2] - 2, shape[3] - 2
        assert [y.shape for y in got] == [(b, 4, h, w), (2 * b, 5, h, 3 * w), (b, 5, 3)]
        for y, want in zip(got, fixed(x)):
            assert np.abs(y).max() > 0.01
            if scheme == "static":
                np.testing.assert_array_equal(y, want)
            else:
                np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_padding_up_to_a_multiple_of_the_input_size_stays_symbolic(device):
    """Padding computed from the input's size ((8 - h % 8) % 8: Swin-, NAFNet- and SwinIR-style
    nets pad to a multiple of their window) raised a TypeError in the lowering (a size node where
    it read an int); the pads are symbolic attrs now, reflect and constant, and the program
    matches the static one at sizes that need 0 to 7 rows and columns."""
    import torch
    import torch.nn.functional as F
    from torch.export import Dim
    n = torch.nn

    class PadToWindow(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.c = n.Conv2d(3, 8, 3, 2, 1)

        def forward(self, x):
            h, w = x.shape[-2:]
            y = F.pad(x, (0, (8 - w % 8) % 8, 0, (8 - h % 8) % 8), mode="reflect")
            return F.pad(self.c(y), (0, (4 - w % 4) % 4), value=1.0)

    ds = ({2: Dim("h", min=8, max=64), 3: Dim("w", min=8, max=64)},)
    calib = [torch.randn(1, 3, 16, 24)]
    dyn, static = _compile_both(PadToWindow().eval(), (torch.randn(1, 3, 20, 12),), calib, "static", ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback and {"remap", "constant_pad_nd"} <= {nd.op for nd in prog.program.nodes}
    for shape, out in [((1, 3, 20, 12), (1, 8, 12, 8)), ((1, 3, 9, 13), (1, 8, 8, 11)), ((1, 3, 16, 33), (1, 8, 8, 23))]:
        x = torch.randn(shape).numpy()
        y = prog(x)
        assert y.shape == out
        np.testing.assert_array_equal(y, vkq_on(static(torch.from_numpy(x)), device)(x))


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_sizes_as_scalar_operands_stay_symbolic(device, scheme):
    """A size used as a number (coordinates normalised by (w - 1), a sum divided by h * w, an
    offset subtracted from an arange: flow warping, positional grids) crashed the lowering with a
    KeyError (the size node was read as a tensor); it is the scalar of the float op now, an
    expression in the program, and matches the static programs at other sizes."""
    import torch
    from torch.export import Dim
    n = torch.nn

    class Grid(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.c = n.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            h, w = x.shape[-2:]
            y = self.c(x)
            gx = torch.arange(w, dtype=torch.float32) / (w - 1) * 2 - 1
            gy = (h - torch.arange(h, dtype=torch.float32)) / h
            return y * 0.5 + gx + gy[:, None] + y.sum((2, 3), keepdim=True) / (h * w)

    ds = ({2: Dim("h", min=4, max=40), 3: Dim("w", min=4, max=40)},)
    dyn, static = _compile_both(Grid().eval(), (torch.randn(1, 3, 12, 10),), [torch.randn(1, 3, 12, 10)], scheme, ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback, prog.program.fallback
    scalars = [nd.attrs["scalar"] for nd in prog.program.nodes if isinstance(nd.attrs.get("scalar"), dict)]
    assert len(scalars) >= 3, scalars                    # (w - 1), h (rsub), h * w: expressions
    for shape in [(1, 3, 12, 10), (1, 3, 5, 31), (1, 3, 23, 4)]:
        x = torch.randn(shape).numpy()
        y = prog(x)
        want = vkq_on(static(torch.from_numpy(x)), device)(x)
        assert y.shape == (1, 4) + shape[2:]
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_sizes_among_the_outputs_follow_the_shape(device, tmp_path):
    """A model returning sizes (a detector's feature-map size, a token count) beside a tensor:
    each is a 0-d int64 output computed at each shape (a KeyError at lowering before)."""
    import torch
    import vkq
    from torch.export import Dim

    class Sizes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.nn.Conv2d(3, 4, 3, stride=2)

        def forward(self, x):
            y = self.c(x)
            return y, y.shape[-1], y.shape[0] * y.shape[2], 0.25

    torch.manual_seed(0)
    model = Sizes().eval()
    ds = ({0: Dim("b", min=1, max=4), 3: Dim("w", min=5, max=40)},)
    prog = vkq.load(vkq.compile(model, (torch.randn(2, 3, 9, 11),), dynamic_shapes=ds).save(tmp_path / "s.vkq"),
                    device=device)
    for shape in [(2, 3, 9, 11), (1, 3, 9, 5), (4, 3, 9, 40), (3, 3, 9, 26)]:
        x = torch.randn(shape)
        y, w, bh, q = prog(x.numpy())
        with torch.no_grad():
            want = model(x)
        assert y.shape == tuple(want[0].shape)
        assert (w.dtype, w.shape, int(w), int(bh), float(q)) == (np.int64, (), *want[1:])
        assert [np.array_equal(a, b) for a, b in zip((y, w, bh, q), prog.run_reference(x.numpy()))] == [True] * 4


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_pixel_shuffle_and_unshuffle_with_dynamic_batch_height_and_width(device, scheme):
    """ESPCN-style super-resolution (a conv to C r^2 channels, pixel_shuffle) and a space-to-depth
    stem (pixel_unshuffle): their index map was made for one size, so the compile was refused
    with free height and width; views and one permute now (normalize_ops), equal to the static
    programs (which keep the one-gather op) at every size."""
    import torch
    import torch.nn.functional as F
    from torch.export import Dim
    n = torch.nn

    class SuperRes(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.c, self.d = n.Conv2d(12, 8, 3, padding=1), n.Conv2d(8, 3 * 9, 3, padding=1)

        def forward(self, x):
            return F.pixel_shuffle(self.d(torch.relu(self.c(F.pixel_unshuffle(x, 2)))), 3)

    ds = ({0: Dim("b", min=1, max=3), 2: Dim("h", min=2, max=20) * 2, 3: Dim("w", min=2, max=20) * 2},)
    dyn, static = _compile_both(SuperRes().eval(), (torch.randn(2, 3, 12, 10),), [torch.randn(2, 3, 12, 10)], scheme, ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback, prog.program.fallback
    assert "take" not in {nd.op for nd in prog.program.nodes}
    for shape in [(1, 3, 12, 10), (2, 3, 6, 30), (3, 3, 22, 4)]:
        x = torch.randn(shape).numpy()
        y = prog(x)
        fixed = vkq_on(static(torch.from_numpy(x)), device)
        assert y.shape == (shape[0], 3, shape[2] // 2 * 3, shape[3] // 2 * 3)
        if scheme == "static":
            np.testing.assert_array_equal(y, fixed(x))
        else:
            np.testing.assert_allclose(y, fixed(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", ["static", "dynamic"])
def test_encoder_decoder_ops_with_dynamic_batch_height_and_width(device, scheme):
    """What encoder-decoder and flow nets do at free sizes, each once refused, on the CPU or made
    static: a max pool's indices unpooled to the encoder's size (ENet, SegNet: the size a
    SymInt list now), a downscale by 0.5 (input size // 2, exact), a meshgrid of aranges of the
    map's lengths (views and expands now) normalised into a grid_sample grid, and a reshape_as
    (its rule read the shape with int(), which made the batch static for the whole model, as
    EfficientNet's). One program, equal to the static programs at every size (odd ones in the
    downscale)."""
    import torch
    import torch.nn.functional as F
    from torch.export import Dim
    n = torch.nn

    class EncoderDecoder(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.c, self.d, self.f = n.Conv2d(3, 8, 3, padding=1), n.Conv2d(8, 8, 3, padding=1), n.Conv2d(8, 2, 1)

        def forward(self, x):
            e = torch.relu(self.c(x))
            p, idx = F.max_pool2d(e, 2, 2, return_indices=True)
            u = F.max_unpool2d(torch.relu(self.d(p)), idx, 2, 2, output_size=e.size()[-2:])
            small = F.interpolate(F.pad(u, (0, 1, 0, 1)), scale_factor=0.5, mode="bilinear")    # odd sizes
            h, w = u.shape[-2:]
            gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32),
                                    indexing="ij")
            flow = torch.tanh(self.f(u))
            grid = torch.stack([gx / (w - 1) * 2 - 1 + flow[:, 0], gy / (h - 1) * 2 - 1 + flow[:, 1]], -1)
            warped = F.grid_sample(u, grid, align_corners=True)
            return warped + e.reshape_as(u), small.mean((2, 3))

    ds = ({0: Dim("b", min=1, max=3), 2: Dim("h", min=2, max=16) * 2, 3: Dim("w", min=2, max=16) * 2},)
    dyn, static = _compile_both(EncoderDecoder().eval(), (torch.randn(2, 3, 12, 10),), [torch.randn(2, 3, 12, 10)],
                                scheme, ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback, prog.program.fallback
    assert isinstance(prog.program.tensors[prog.program.inputs[0]].shape[0], str)     # the batch stays dynamic
    for shape in [(2, 3, 12, 10), (1, 3, 6, 14), (3, 3, 22, 4)]:
        x = torch.randn(shape).numpy()
        got = prog(x)
        want = vkq_on(static(torch.from_numpy(x)), device)(x)
        assert got[0].shape == (shape[0], 8) + shape[2:] and got[1].shape == (shape[0], 8)
        for g, w_ in zip(got, want):
            if scheme == "static":
                np.testing.assert_array_equal(g, w_)
            else:
                np.testing.assert_allclose(g, w_, rtol=1e-5, atol=1e-5)


def test_batch_norm_1d_head_and_slices_to_the_end_with_dynamic_sizes(device):
    """A BatchNorm1d on pooled features (RepViT's head) with a free batch put torch's symbol for
    it into the graph's code (NameError during calibration); a slice to the end (x[:, -1:],
    EdgeNeXt's positional encoding) took the example's size as its end. Both run at any size
    now, equal to the static programs."""
    import torch
    from torch.export import Dim
    n = torch.nn

    class Head(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.c, self.bn, self.fc = n.Conv2d(3, 8, 3, padding=1), n.BatchNorm1d(8), n.Linear(8, 4)
                self.bn.running_mean.uniform_(-0.5, 0.5), self.bn.running_var.uniform_(0.5, 2)

        def forward(self, x):
            h = torch.relu(self.c(x))
            edge = h[:, :, -1:, :] * 2 - h[:, :, :1, :] + h[:, :, :, -2:].mean((2, 3), keepdim=True)
            return self.fc(self.bn(h.mean((2, 3)))), edge

    ds = ({0: Dim("b", min=1, max=4), 2: Dim("h", min=4, max=32), 3: Dim("w", min=4, max=32)},)
    dyn, static = _compile_both(Head().eval(), (torch.randn(2, 3, 12, 10),), [torch.randn(2, 3, 12, 10)], "static", ds)
    prog = vkq_on(dyn, device)
    assert not prog.program.fallback, prog.program.fallback
    for shape in [(2, 3, 12, 10), (1, 3, 5, 31), (4, 3, 23, 4)]:
        x = torch.randn(shape).numpy()
        got, want = prog(x), vkq_on(static(torch.from_numpy(x)), device)(x)
        assert got[0].shape == (shape[0], 4) and got[1].shape == (shape[0], 8, 1, shape[3])
        for g, w_ in zip(got, want):
            np.testing.assert_array_equal(g, w_)


def test_a_derived_dim_that_export_pins_to_one_size_is_warned_of():
    """torch.export may pin the root of a derived Dim (32 * h) to one value without raising (a
    guard on a size that is 1 at the example: timm's selecsls42b at 64 px gives h in [2, 2]);
    the program then runs at that size only, and the compile says so instead of leaving the
    user to find out at the first other size. A root that stays free is not warned of."""
    import warnings
    import torch
    from torch.export import Dim
    from vkq.dynamic import user_bounds
    g = torch.fx.Graph()
    g.placeholder("x")
    g.output(None)
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    ds = ({0: Dim("b", min=1, max=4), 2: Dim("h", min=1, max=6) * 32},)
    shapes = {"x": ("s0", 3, "32*s39")}
    with pytest.warns(UserWarning, match=r"input 'x' dimension 2 \(32\*s39\) was declared dynamic, but torch.export's "
                                         r"guards fix s39 to 2: the program runs at that size only"):
        bounds, names = user_bounds(gm, shapes, {"s0": (1, 4), "s39": (2, 2)}, ds)
    assert bounds == {"s0": (1, 4), "s39": (2, 2)} and names == {"s0": "b", "s39": "h"}  # (32 * h)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        user_bounds(gm, shapes, {"s0": (1, 4), "s39": (1, 6)}, ds)


def test_index_assignments_with_dynamic_dims(device):
    """scores[scores < t] = -inf and x[..., [0, -1]] = 0 (index_put) compiled once with dynamic batch
    and length run on Vulkan at every shape, and so do rows written at computed indices along the
    dynamic length (their negative wrap reads its size from the graph: they ran in torch)."""
    import torch
    from torch.export import Dim
    from torch import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            y = self.a(x).clone()
            y[y < -0.6] = float("-inf")
            y = y.softmax(-1)                                 # (a row of all -inf: improbable in 8)
            y[..., torch.tensor([0, -1])] = 0.0
            y[:, (x[0, :2, 0] > 0).long() - 1] = 1.0
            return self.b(y)

    torch.manual_seed(0)
    B, L = Dim("batch", min=1, max=6), Dim("seq", min=2, max=40)
    calib = [(torch.randn(3, 7, 8),) for _ in range(3)]
    dyn, static = _compile_both(M().eval(), (torch.randn(2, 5, 8),), calib, "static", ({0: B, 1: L},))
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [], prog.fallback_ops
    assert {"where", "scatter"} <= {n.op for n in prog.program.nodes}
    rng = np.random.default_rng(1)
    for b, l in [(1, 2), (4, 33), (2, 5)]:
        x = rng.standard_normal((b, l, 8)).astype(np.float32)
        x[0, :2, 0] = [-1.0, 1.0]
        y = prog(x)
        np.testing.assert_array_equal(y, prog.run_reference(x))
        np.testing.assert_allclose(y, vkq_on(static(torch.from_numpy(x)), device)(x), rtol=1e-5, atol=1e-6)


def test_packed_attention_split_writes_and_repeats_with_a_dynamic_length(device):
    """What Hugging Face decoders do along a dynamic sequence, each of which failed to compile or
    to run or ran on the CPU: ModernBERT's packed q, k, v unbound with v read straight into the
    attention (the executor's rewrites at the upper bounds then folded a view that keeping their
    nodes at other shapes could not: every call refused), DeepSeek-V3's key built by writes into
    halves of a new_empty (export's slice_scatter, the CPU), BLOOM's alibi.repeat(1, 1, 1) (a take
    by the example's index map, refused) and a pad the lowering makes (F.pad with a negative
    side: a slice and a pad whose symbolic length was guessed wrong, refused)."""
    import torch
    import torch.nn.functional as F
    from torch.export import Dim
    n = torch.nn

    class Decoder(n.Module):
        def __init__(self):
            super().__init__()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.qkv, self.rope, self.out = n.Linear(16, 48), n.Linear(16, 8), n.Linear(16, 16)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, 2, 8).transpose(3, 1).unbind(dim=2)
            half = self.rope(x)
            key = half.new_empty(b, s, 16)
            key[..., :8] = half
            key[..., 8:] = torch.tanh(half)
            k = k + key.view(b, s, 2, 8).transpose(1, 2)
            y = F.scaled_dot_product_attention(q * 0.5, k, v).transpose(1, 2).reshape(b, s, 16)
            bias = self.out(y).repeat(1, 1, 1)
            return F.pad(bias, (0, 0, -1, 2)) + 1.0

    L = Dim("seq", min=2, max=40)
    calib = [(torch.randn(1, s, 16),) for s in (7, 13, 21)]
    dyn, static = _compile_both(Decoder().eval(), (torch.randn(1, 11, 16),), calib, "static", ({1: L},))
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [], prog.fallback_ops
    rng = np.random.default_rng(3)
    for s in (40, 2, 17, 40, 5):
        x = rng.standard_normal((1, s, 16)).astype(np.float32)
        y = prog(x)
        assert y.shape == (1, s + 1, 16)
        np.testing.assert_array_equal(y, prog.run_reference(x))
        np.testing.assert_allclose(y, vkq_on(static(torch.from_numpy(x)), device)(x), rtol=1e-5, atol=1e-6)


class FourierMixing:
    """FNet's token mixing (fftn over the sequence and hidden dims, real part) and other parts of
    transforms along a dynamic length (no linear after them: under the dynamic scheme its per-row
    int8 rounding would turn float rounding into whole steps)."""
    @staticmethod
    def make():
        import torch

        class Mixer(torch.nn.Module):
            def forward(self, x):                  # x (batch, length, 12)
                fft = torch.fft
                return (fft.fftn(x, dim=(1, 2)).real + fft.fft(x, dim=1, norm="ortho").imag
                        + fft.fft2(x, norm="forward").abs() * fft.rfft(x).real.mean(-1, keepdim=True)
                        + torch.view_as_real(fft.fft(x, dim=1))[..., 1])     # (imag, as an export may read it)
        return Mixer().eval()


def test_fourier_transforms_along_a_dynamic_length(device):
    """Fourier transforms along a dynamic dim (FNet compiled once for every sequence length) were
    refused ("cannot tell how its shape follows the inputs' dynamic dims": the cos / sin tables
    were constants of the example's length); the graph now computes them from the length, on
    Vulkan, and the program at each length equals the one compiled for it and torch's float FFT
    within float rounding (fft, fft2, fftn, any norm; rfft along a static dim. A one-sided
    transform along the dynamic dim, of length n // 2 + 1, is not rewritten)."""
    import torch
    from torch.export import Dim
    ds = ({0: Dim("batch", min=1, max=3), 1: Dim("length", min=2, max=70)},)
    calib = [torch.randn(s) for s in [(2, 9, 12), (1, 31, 12)]]
    model = FourierMixing.make()
    dyn, static = _compile_both(model, (torch.randn(2, 13, 12),), calib, "dynamic", ds)
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == [] and set(prog.program.symbols.values()) == {(1, 3), (2, 70)}
    assert sum(n.op in ("cos", "sin") for n in prog.program.nodes) >= 2
    for shape in [(1, 2, 12), (3, 7, 12), (1, 70, 12)]:
        x = torch.randn(shape)
        y = prog(x.numpy())
        assert y.shape == shape
        want = model(x).numpy()
        np.testing.assert_allclose(y, vkq_on(static(x), device)(x.numpy()), rtol=0, atol=2e-6 * np.abs(want).max())
        np.testing.assert_allclose(y, prog.run_reference(x.numpy()), rtol=0, atol=2e-6 * np.abs(want).max())
        np.testing.assert_allclose(y, want, rtol=0, atol=2e-5 * np.abs(want).max())


def test_fnet_style_mixing_in_int8_with_a_dynamic_length(device):
    """Hugging Face's FNet exports real(fftn) as select(view_as_real(fftn), -1, 0), and under the
    static scheme PT2E quantizes the (re, im) pairs, the select then an int8 gather: view_as_real
    becomes the two DFTs side by side, so FNet-style token mixing between int8 linears compiles
    once for every length (it was refused), nothing on the CPU, agreeing with PT2E's model."""
    import torch
    from torch.export import Dim
    from test_lower import cosine

    class Mixing(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b, self.norm = torch.nn.Linear(12, 12), torch.nn.Linear(12, 5), torch.nn.LayerNorm(12)

        def forward(self, x):                      # FNet's layer: norm(fftn(h).real + h), its real as
            h = self.a(x)                          # Hugging Face's FNet exports it
            return self.b(self.norm(torch.view_as_real(torch.fft.fftn(h, dim=(1, 2)))[..., 0] + h))
    import vkq
    ds = ({1: Dim("length", min=2, max=40)},)
    model = Mixing().eval()
    gm = vkq.quantize(model, (torch.randn(1, 9, 12),), [(torch.randn(1, n, 12),) for n in (5, 17, 33)], "static",
                      dynamic_shapes=ds)
    prog = vkq_on(vkq.CompiledProgram(vkq.compile(gm, (torch.randn(1, 9, 12),), dynamic_shapes=ds).program), device)
    assert prog.fallback_ops == []
    for n in (3, 21, 40):
        x = torch.randn(1, n, 12)
        y = prog(x.numpy())
        np.testing.assert_array_equal(y, prog.run_reference(x.numpy()))
        assert cosine(y, gm(x).detach().numpy()) > 0.99


class Unfolds:
    """nn.Unfold along dynamic dims: ConvBERT's span kernels over the tokens ((9, 1) windows of a
    (batch, channels, length, 1) map, padded 4) and a strided, dilated 2-D unfold of an image."""
    @staticmethod
    def make():
        import torch
        F = torch.nn.functional

        class M(torch.nn.Module):
            def forward(self, tokens, image):      # tokens (B, L, 8), image (B, 3, H, W)
                span = F.unfold(tokens.transpose(1, 2).unsqueeze(-1), (9, 1), padding=(4, 0))   # (B, 72, L)
                patches = F.unfold(image, (3, 2), dilation=(2, 1), padding=1, stride=(2, 3))
                return span.transpose(1, 2) * 0.5, patches
        return M().eval()


def test_unfold_along_dynamic_dims(device):
    """F.unfold (im2col) ran as a take whose index map was made for the example's size, so
    ConvBERT compiled for every length was refused; along a dynamic dim it is now the kernel's
    shifted strided slices, concatenated: equal to torch at every size, batch dynamic too."""
    import torch
    from torch.export import Dim
    ds = ({0: Dim("batch", min=1, max=3), 1: Dim("length", min=4, max=40)},
          {0: Dim("batch", min=1, max=3), 2: Dim("h", min=6, max=30), 3: Dim("w", min=6, max=30)})
    model = Unfolds.make()
    example = (torch.randn(2, 11, 8), torch.randn(2, 3, 13, 10))
    dyn, static = _compile_both(model, example, [example], "dynamic", ds)
    prog = vkq_on(dyn, device)
    assert prog.fallback_ops == []
    assert not any(n.op == "take" for n in prog.program.nodes), [n.op for n in prog.program.nodes]
    for b, length, h, w in [(1, 4, 6, 6), (3, 40, 30, 17), (2, 23, 9, 29)]:
        xs = (torch.randn(b, length, 8), torch.randn(b, 3, h, w))
        got = prog(*[x.numpy() for x in xs])
        for g, want in zip(got, model(*xs)):
            np.testing.assert_array_equal(g, want.numpy())
