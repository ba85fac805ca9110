"""Every ATen converter against PyTorch, one small function per case.

Each case is exported with torch.export and converted twice: as exported (``conv2d``,
``linear``, ``layer_norm`` kept whole) and after torch's full decomposition to core
ATen (``convolution``, ``addmm``, ``native_layer_norm``, ...), so both spellings of an
op are checked. A test keeps the table honest: every converter must be reached.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import aot
import runtime_lite
from aot.errors import UnsupportedOpsError
from aot.frontend.torch.aten import ATEN
from aot.testing.aten_coverage import core_ops, opinfos

g = torch.Generator().manual_seed(0)


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def w(*shape: int) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randn(*shape, generator=g) * 0.3)


class Fn(torch.nn.Module):
    """A function as a module, with its parameters registered so they come in as constants."""

    def __init__(self, fn, **params):
        super().__init__()
        self.fn = fn
        for name, value in params.items():
            setattr(self, name, value)

    def forward(self, *xs):
        return self.fn(self, *xs)


def _assigned(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Slice assignment (Swin's attention mask): functionalized to slice_scatter and copy."""
    y = x.clone()
    y[:, 1:3] = s
    y[1:, ::2] = -1.0
    y[0].copy_(s[:, 0].sum())
    return y


CASES: dict[str, tuple[Fn, tuple]] = {
    # elementwise and activations
    "unary": (
        Fn(
            lambda m, x: (
                torch.exp(-x.abs())
                + torch.sqrt(x.abs() + 1).log()
                + torch.erf(x)
                + torch.floor(x)
                + torch.ceil(x)
                + torch.sin(x) * torch.cos(x)
                + torch.rsqrt(x.abs() + 1)
                + torch.reciprocal(x + 5)
                + torch.tanh(x)
                + torch.sigmoid(x)
            )
        ),
        (r(2, 5),),
    ),  # fmt: skip
    "binary": (
        Fn(
            lambda m, a, b: (
                (a + b) * (a - b) / (b.abs() + 1)
                + torch.maximum(a, b)
                - torch.minimum(a, b)
                + a.pow(2)
                + torch.pow(a.abs(), b)
                + torch.add(a, b, alpha=2)
                + (1 - a)
                + 2.5 * b
            )
        ),
        (r(3, 4), r(3, 4)),
    ),  # fmt: skip
    "comparisons_where": (
        Fn(
            lambda m, a, b: (
                torch.where((a > b) | (a <= -1), a, b)
                + torch.where(~(a == b), 1.0, 0.0)
                + (a >= b).float()
                + torch.where(a < 0.5, a, 0.0)
            )
        ),
        (r(3, 4), r(3, 4)),
    ),  # fmt: skip
    "logic_and_fills": (
        Fn(
            lambda m, a, b: (
                (
                    ((a > 0) & (b > 0)) ^ (a > b) | torch.logical_or(a > 1, b > 1) ^ torch.logical_xor(a < 0, b < 0)
                ).float()
                + torch.ones_like(a)
                + torch.zeros_like(b)
                + torch.full_like(a, 2.0)
            )
        ),
        (r(3, 4), r(3, 4)),
    ),  # fmt: skip
    "division_modes": (
        Fn(
            lambda m, i, x: (
                i / 3
                + torch.div(i, 2, rounding_mode="floor")
                + torch.div(i, -4, rounding_mode="trunc")
                + torch.div(x, 0.3, rounding_mode="floor")
                + torch.div(x, 0.3, rounding_mode="trunc")
            )
        ),
        (torch.arange(-6, 6).reshape(3, 4), r(3, 4)),
    ),  # fmt: skip
    "activations": (
        Fn(
            lambda m, x: (
                F.relu(x)
                + F.relu6(x * 4)
                + F.hardtanh(x, -0.5, 0.5)
                + x.clamp(-1, 2)
                + F.gelu(x)
                + F.gelu(x, approximate="tanh")
                + F.silu(x)
                + F.hardswish(x)
                + F.hardsigmoid(x)
                + F.leaky_relu(x, 0.2)
                + F.elu(x, 0.7)
            )
        ),
        (r(2, 3, 5),),
    ),  # fmt: skip
    "softmax": (Fn(lambda m, x: F.softmax(x, dim=1) + F.log_softmax(x, dim=-1)), (r(2, 6, 3),)),
    # convolution, pooling, normalisation
    "conv": (
        Fn(
            lambda m, x: (
                F.conv2d(x, m.w1, m.b1, stride=2, padding=1).sum(1, keepdim=True)
                + F.conv2d(x, m.w2, padding="same", dilation=2, groups=2)[:, :1, ::2, ::2]
            ),
            w1=w(4, 4, 3, 3),
            b1=w(4),
            w2=w(6, 2, 3, 3),
        ),
        (r(1, 4, 8, 8),),
    ),  # fmt: skip
    "conv1d_3d_transposed": (
        Fn(
            lambda m, x1, x3: (
                F.conv1d(x1, m.w1, padding=1).sum()
                + F.conv3d(x3, m.w3).sum()
                + F.conv_transpose2d(x3[:, :, 0], m.wt, stride=2).sum()
            ),
            w1=w(3, 2, 3),
            w3=w(2, 2, 2, 2, 2),
            wt=w(2, 3, 3, 3),
        ),
        (r(1, 2, 7), r(1, 2, 4, 5, 5)),
    ),  # fmt: skip
    "pooling": (
        Fn(
            lambda m, x: (
                F.max_pool2d(x, 3, 2, 1)
                + F.avg_pool2d(x, 3, 2, 1)
                + F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)
                + F.adaptive_avg_pool2d(x, 4)
                + F.adaptive_avg_pool2d(x, (3, 5)).sum((2, 3), keepdim=True)  # overlapping bins
                + F.adaptive_avg_pool2d(x[:, :, :1, :1], 6).mean()  # AlexNet on a small image: 1x1 to 6x6
                + F.adaptive_avg_pool1d(x[:, 0], 3).mean()
            )
        ),
        (r(1, 3, 8, 8),),
    ),  # fmt: skip
    "pooling_1d_3d": (
        Fn(
            lambda m, x1, x3: (
                F.max_pool1d(x1, 2).sum()
                + F.avg_pool1d(x1, 2).sum()
                + F.max_pool3d(x3, 2).sum()
                + F.avg_pool3d(x3, 2).sum()
                + F.adaptive_avg_pool1d(x1, 1).sum()
                + F.adaptive_avg_pool3d(x3, 1).sum()
            )
        ),
        (r(1, 2, 8), r(1, 2, 4, 4, 4)),
    ),  # fmt: skip
    "batch_norm": (
        torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4), torch.nn.ReLU()),
        (r(2, 3, 5, 5),),
    ),  # fmt: skip
    "layer_norm": (
        Fn(lambda m, x: F.layer_norm(x, (5,), m.gamma, m.beta) + F.layer_norm(x, (4, 5)), gamma=w(5), beta=w(5)),
        (r(2, 4, 5),),
    ),  # fmt: skip
    "pad": (
        Fn(
            lambda m, x: (
                F.pad(x, (1, 2, 0, 1)).sum()
                + F.pad(x, (-1, 2, 1, -2), value=0.5).sum()
                + F.pad(x, (2, 1, 1, 2), mode="reflect")
                + F.pad(x, (2, 1, 1, 2), mode="replicate")
                + F.pad(x, (2, 1, 1, 2), mode="circular")
            )
        ),
        (r(1, 2, 5, 6),),
    ),  # fmt: skip
    # linear algebra
    "linear_matmul": (
        Fn(
            lambda m, x, y: (
                F.linear(x, m.w) @ y + torch.mm(x[0], m.w.t()).sum() + torch.bmm(x, x.transpose(1, 2)).sum()
            ),
            w=w(6, 5),
        ),
        (r(2, 3, 5), r(6, 2)),
    ),  # fmt: skip
    "addmm": (Fn(lambda m, x: torch.addmm(m.b, x, m.w), w=w(5, 3), b=w(3)), (r(4, 5),)),
    "embedding": (Fn(lambda m, i: F.embedding(i, m.table), table=w(10, 4)), (torch.tensor([[1, 2, 9], [0, 0, 5]]),)),
    "attention": (
        Fn(
            lambda m, q, k, v, mask: (
                F.scaled_dot_product_attention(q, k, v)
                + F.scaled_dot_product_attention(q, k, v, is_causal=True)
                + F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                + F.scaled_dot_product_attention(q, k, v, attn_mask=mask.float() * -0.5, scale=0.3)
            )
        ),
        (r(2, 3, 5, 8), r(2, 3, 5, 8), r(2, 3, 5, 8), torch.rand(5, 5, generator=g) > 0.3),
    ),  # fmt: skip
    # reductions
    "reductions": (
        Fn(
            lambda m, x: (
                x.mean(dim=(1, 2))
                + x.sum(dim=-1).sum(1)
                + x.amax(dim=1).amin(dim=-1)
                + x.mean(dim=1, keepdim=True).sum((1, 2))
            )
        ),
        (r(2, 3, 4),),
    ),  # fmt: skip
    "vector_norm": (
        Fn(
            lambda m, x: (
                F.normalize(x, dim=-1)
                + torch.linalg.vector_norm(x, dim=(1, 2), keepdim=True)
                + torch.linalg.vector_norm(x, ord=float("inf"), dim=1, keepdim=True)
                + torch.linalg.vector_norm(x, ord=float("-inf"), dim=-1, keepdim=True)
                + torch.linalg.vector_norm(x, ord=0)
                + torch.linalg.vector_norm(x, ord=1, dim=0)
                + torch.linalg.vector_norm(x, ord=3.5, dim=-1, keepdim=True)
                + torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=torch.float64).float()
            )
        ),
        (r(2, 3, 4) * (r(2, 3, 4) > 0),),
    ),  # fmt: skip
    # shapes and data movement
    "views": (
        Fn(
            lambda m, x: (
                x.view(2, -1).reshape(4, 6).t().contiguous().flatten()
                + x.permute(2, 0, 1).flatten(1).transpose(0, 1).reshape(-1)
                + x.unflatten(2, (2, 2)).flatten(2).flatten()
            )
        ),
        (r(2, 3, 4),),
    ),  # fmt: skip
    "squeeze_expand": (
        Fn(
            lambda m, x: (
                x.unsqueeze(1).squeeze(1).squeeze(0).expand(3, 2, 4).sum(0) + x[:, :1].expand(-1, 2, -1).squeeze()
            )
        ),
        (r(1, 2, 4),),
    ),  # fmt: skip
    "cat_split_chunk": (
        Fn(
            lambda m, x: (
                torch.cat(x.split(2, dim=1), dim=0).sum()
                + torch.cat(x.chunk(3)[::-1])
                + torch.cat(x.split([1, 3], dim=1), dim=1)
            )
        ),
        (r(3, 4),),
    ),  # fmt: skip
    "slice_select": (
        Fn(lambda m, x: x[:, 1:3] + x[:, -2:] + x[:, ::2] + x.select(1, 2)[:, None] + x[1:, :2].sum(0)),
        (r(3, 4),),
    ),  # fmt: skip
    "slice_scatter_copy": (
        Fn(
            lambda m, x, s: (
                torch.slice_scatter(x, s, dim=1, start=1, end=3)
                + torch.slice_scatter(x, s, dim=1, start=0, end=4, step=2)
                + torch.slice_scatter(x, s.new_ones(3, 2), dim=-1, start=-2)
                + torch.slice_scatter(x, x[:2] * 2, end=2)
                + torch.clamp_min(x, -0.2)
                + torch.clamp_max(x, 0.3)
                + s.sum(1, keepdim=True).expand_as(x)
                + _assigned(x, s)
            )
        ),
        (r(3, 4), r(3, 2)),
    ),  # fmt: skip
    "dtypes": (
        Fn(lambda m, x: x.to(torch.float64).to(torch.float32) + x.half().float() + F.dropout(x, 0.5, False)),
        (r(3, 4),),
    ),  # fmt: skip
    # integer ids, masks and indexing (transformer embeddings and attention masks)
    "integer_arithmetic": (
        Fn(
            lambda m, i, j: (
                (i * 3 + j - 1) // 2
                + torch.remainder(i - 7, 3)
                + torch.fmod(i - 7, 3)
                + (i != 2).long()
                + i.ne(j).int()
                + ((i & 6) | (j ^ 1))
                + (~i)
                + torch.where(i.bool() & ~(j > 3), i, -j)
            )
        ),
        (torch.arange(12).reshape(3, 4), torch.arange(12).reshape(3, 4).flip(1)),
    ),  # fmt: skip
    "fills": (
        Fn(
            lambda m, x, i: (
                torch.empty_like(x).fill_(2.0)
                + x.new_zeros(x.shape)
                + torch.zeros(3, 4)
                + torch.ones(3, 4, dtype=torch.int64)
                + x.new_full((3, 4), 0.5)
                + torch.full_like(i, 3)
                + x.masked_fill(i > 5, -2.0)
                + x.masked_fill(x < 0, float("-inf")).clamp(min=-9.0)
                + torch.arange(0, 4, 1, dtype=torch.float32)
                + torch.arange(3).unsqueeze(1).to(torch.float32)
            )
        ),
        (r(3, 4), torch.arange(12).reshape(3, 4)),
    ),  # fmt: skip
    "gather_scatter": (
        Fn(
            lambda m, x, idx: (
                torch.gather(x, 1, idx)
                + torch.gather(x, 0, idx.clamp(max=2).flip(0))
                + torch.scatter(torch.zeros(3, 4), 1, idx, x[:, :3]).sum(1, keepdim=True)
                + torch.zeros(3, 4).scatter_add(1, idx, x[:, :3]).sum(1, keepdim=True)
                + torch.zeros(3, 4).scatter(1, idx, 1.5)[:, :3]
                + torch.zeros(3, 4).scatter_reduce(1, idx, x[:, :3], "amax").sum(1, keepdim=True)
                + torch.index_select(x, 1, torch.tensor([3, 0, 0]))
                + torch.index_select(x, 0, torch.tensor([2, 1, 0]))[:, :3]
            )
        ),
        (r(3, 4), torch.tensor([[0, 2, 1], [3, 3, 0], [1, 0, 2]])),
    ),  # fmt: skip
    "advanced_indexing": (
        Fn(
            lambda m, x, i, j: torch.cat(
                [
                    x[i].flatten(),
                    x[:, j].flatten(),
                    x[i, j].flatten(),
                    x[i.unsqueeze(1), :, j.unsqueeze(0)].flatten(),  # apart: the index dims go first
                    x[:, i, j].flatten(),  # adjacent: they stay where the first indexed axis was
                    x[-1, :, -2],
                    x[i, :, j[:1]].flatten(),
                    m.table[i.unsqueeze(-1), j].flatten(),
                ]
            ),
            table=w(5, 6, 2),
        ),
        (r(3, 5, 4), torch.tensor([0, 2, -1]), torch.tensor([1, 3, 0])),
    ),  # fmt: skip
    "cumsum_trilu": (
        Fn(
            lambda m, x, mask: (
                torch.cumsum(x, dim=1)
                + torch.cumsum(mask, dim=-1).float()
                + torch.cumsum(x, 0, dtype=torch.float64).float()
                + torch.triu(x)
                + torch.tril(x, diagonal=-1)
                + torch.triu(torch.ones(4, 4), diagonal=1)
            )
        ),
        (r(4, 4), torch.rand(4, 4, generator=g) > 0.5),
    ),  # fmt: skip
    "argmax_topk": (
        Fn(
            lambda m, x: (
                torch.argmax(x, dim=-1).float()
                + torch.argmin(x, dim=1, keepdim=True).float().squeeze(1)
                + torch.argmax(x).float()
                + torch.topk(x, 2, dim=-1).values.sum(-1)
                + torch.topk(x, 2, largest=False).indices.float().sum(-1)
            )
        ),
        (r(3, 5),),
    ),  # fmt: skip
    "rotary_rmsnorm": (
        Fn(
            lambda m, x, pos: (
                torch.cat([-x[..., 4:], x[..., :4]], dim=-1) * torch.sin(pos[:, None] * m.freq).repeat(1, 2)
                + x * torch.cos(pos[:, None] * m.freq).repeat(1, 2)
                + m.gain * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            ),
            freq=w(4),
            gain=w(8),
        ),
        (r(2, 5, 8), torch.arange(5).float()),
    ),  # fmt: skip
    "recurrent": (
        Fn(
            lambda m, x: m.lstm(x)[0].sum(-1) + m.gru(x)[0].sum(-1) + m.rnn(x)[0].sum(-1) + m.relu_rnn(x)[0].sum(-1),
            lstm=torch.nn.LSTM(4, 5, 2, bidirectional=True),
            gru=torch.nn.GRU(4, 5, batch_first=True),
            rnn=torch.nn.RNN(4, 5),
            relu_rnn=torch.nn.RNN(4, 5, nonlinearity="relu"),
        ),
        (r(3, 2, 4),),
    ),
}


SEQ = torch.export.Dim("seq", min=3, max=64)

#: Cases whose sizes follow a dynamic dim at run time (sym_size, arithmetic on sizes, arange(seq)).
DYNAMIC_CASES: dict[str, tuple[Fn, tuple, tuple, tuple]] = {
    "positions_and_masks": (
        Fn(
            lambda m, ids, mask: (
                m.table[: ids.shape[1]]
                + F.embedding(torch.arange(ids.shape[1]), m.table)
                + F.embedding(ids, m.table)
                + torch.full((ids.shape[1], 1), 0.5)
                + torch.ones(ids.shape[1], ids.shape[1] * 2 // 2).triu(1).sum(-1, keepdim=True)
                + mask[:, :, None].expand(-1, -1, 4).float()
                + mask.cumsum(-1)[..., None].float()
                + mask[:, None, None, :]
                .expand(ids.shape[0], 1, ids.shape[1], ids.shape[1])
                .float()
                .sum((1, 2))[..., None]
                + torch.zeros_like(mask)[..., None]
            ),
            table=w(64, 4),
        ),
        (torch.tensor([[1, 5, 9]]), torch.tensor([[1, 1, 0]])),
        ({1: SEQ}, {1: SEQ}),
        (torch.randint(0, 64, (1, 11), generator=g), torch.randint(0, 2, (1, 11), generator=g)),
    ),  # fmt: skip
    "run_time_views": (
        Fn(
            lambda m, x: (
                x.view(x.shape[0], x.shape[1], 2, -1)
                .transpose(1, 2)
                .reshape(x.shape[0] * 2, x.shape[1], -1)
                .sum(0)
                .repeat(1, 2)
                + x[:, 1:].mean(1, keepdim=True)[0]
                + x.new_zeros(x.shape[1], 4)
                + torch.arange(0, x.shape[1] * 2, 2, dtype=torch.float32)[:, None]
            )
        ),
        (r(2, 6, 4),),
        ({1: SEQ},),
        (r(2, 9, 4),),
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", list(DYNAMIC_CASES))
def test_run_time_sizes_follow_the_input(name):
    model, inputs, dynamic, other = DYNAMIC_CASES[name]
    program = torch.export.export(model.eval(), inputs, dynamic_shapes=(dynamic,))  # Fn takes *xs
    module = runtime_lite.load(aot.build(program).to_bytes())
    for example in (inputs, other):  # one bundle, two sequence lengths
        with torch.no_grad():
            expected = model(*example).numpy()
        np.testing.assert_allclose(module.run([x.numpy() for x in example])[0], expected, rtol=2e-5, atol=2e-5)


def convert_and_run(program, inputs) -> list[np.ndarray]:
    module = runtime_lite.load(aot.build(program).to_bytes())
    return module.run([x.numpy() for x in inputs])


def targets(program) -> set[str]:
    return {str(n.target.overloadpacket) for n in program.graph.nodes if hasattr(n.target, "overloadpacket")}


@pytest.mark.parametrize("decomposed", [False, True], ids=["as-exported", "core-aten"])
@pytest.mark.parametrize("name", list(CASES))
def test_case_matches_pytorch(name, decomposed):
    model, inputs = CASES[name]
    model.eval()
    with torch.no_grad():
        expected = model(*inputs)
    program = torch.export.export(model, inputs)
    if decomposed:
        program = program.run_decompositions()
    (actual,) = convert_and_run(program, inputs)
    np.testing.assert_allclose(actual, expected.numpy(), rtol=2e-5, atol=2e-5)


#: Converters registered under another name torch.export never emits in these cases (``fill`` is
#: what functionalization makes of ``fill_``, inside the frontend).
ALIASES = {"aten.clip", "aten.concat", "aten.detach", "aten.unsafe_split", "aten.native_batch_norm",
           "aten._adaptive_avg_pool2d", "aten.to", "aten.conv_transpose1d", "aten.conv_transpose3d",
           "aten.max_pool1d", "aten.max_pool3d", "aten.alias", "aten.lift_fresh_copy", "aten._unsafe_view",
           "aten.fill", "aten.empty", "aten.new_empty", "aten.new_ones"}  # fmt: skip


def test_every_converter_is_exercised():
    # Core ATen converters checked on samples from PyTorch's OpInfo database instead (tests/test_aten_opinfo.py,
    # which fails unless one of an op's samples reaches it and matches).
    opinfo_tested = {f"aten.{op}" for op in core_ops() if opinfos(op)}
    seen: set[str] = set()
    cases = [(model, inputs, None) for model, inputs in CASES.values()]
    cases += [(model, inputs, dynamic) for model, inputs, dynamic, _ in DYNAMIC_CASES.values()]
    for model, inputs, dynamic in cases:
        program = torch.export.export(model.eval(), inputs, dynamic_shapes=dynamic and (dynamic,))
        seen |= targets(program) | targets(program.run_decompositions())
    assert {k for k in ATEN if k.startswith("aten.")} - seen - ALIASES - opinfo_tested == set()


def test_pads_known_only_at_run_time_are_one_line_errors():
    """Swin pads its feature map to a multiple of the window: under a dynamic size the pads are symbolic."""
    model = Fn(lambda m, x: F.pad(x, (0, (4 - x.shape[1] % 4) % 4)))
    program = torch.export.export(model.eval(), (r(2, 6),), dynamic_shapes=(({1: SEQ},),))
    with pytest.raises(UnsupportedOpsError, match=r"node 'pad': pads known only at run time") as info:
        aot.build(program)
    assert "\n" not in str(info.value)
    fixed = aot.build(program, input_shapes={"xs_0": (2, 6)})  # fixing the shape makes the pads constants
    x = r(2, 6)
    np.testing.assert_allclose(runtime_lite.load(fixed.to_bytes()).run([x.numpy()])[0], model(x).numpy())
