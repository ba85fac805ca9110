"""nn.LSTM, nn.GRU and nn.RNN through torch.export against PyTorch itself.

``aten.lstm`` / ``aten.gru`` / ``aten.rnn_tanh`` / ``aten.rnn_relu`` are converted whole, each layer through the
ONNX frontend's recurrent layer (aot/frontend/torch/recurrent.py), never through torch's decomposition into one
cell per step: batch_first or not, one and two layers, bidirectional, without biases, initial states given or
not, and a dynamic batch. (torch.export fixes the sequence length of these modules: see the time-loop test.)
"""

from __future__ import annotations

import numpy as np
import pytest

import aot
import runtime_lite
from aot.errors import UnsupportedOpsError
from aot.frontend import from_exported_program
from aot.frontend.torch.importer import _decompose_unknown

torch = pytest.importorskip("torch")
nn = torch.nn
# torch's own note on nn.LSTM's flattened weights during export, about the module, not the program
pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes self.rnn._flat_weights")

FEATURES, HIDDEN, BATCH, SEQ = 6, 8, 3, 5


class Recurrent(nn.Module):
    """The module's output and its final states, the initial states as optional inputs."""

    def __init__(self, rnn: nn.Module):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, h0=None, c0=None):
        hx = None if h0 is None else ((h0, c0) if isinstance(self.rnn, nn.LSTM) else h0)
        y, final = self.rnn(x, hx)
        return (y, *final) if isinstance(final, tuple) else (y, final)


#: name -> (module, whether the initial states are given)
CASES = {
    "lstm": (lambda: nn.LSTM(FEATURES, HIDDEN), False),
    "lstm_batch_first_2_layers_states": (lambda: nn.LSTM(FEATURES, HIDDEN, 2, batch_first=True), True),
    "lstm_bidirectional_2_layers": (
        lambda: nn.LSTM(FEATURES, HIDDEN, 2, batch_first=True, bidirectional=True),
        False,
    ),
    "lstm_bidirectional_states": (lambda: nn.LSTM(FEATURES, HIDDEN, bidirectional=True), True),
    "lstm_no_bias_2_layers": (lambda: nn.LSTM(FEATURES, HIDDEN, 2, bias=False), True),
    "gru": (lambda: nn.GRU(FEATURES, HIDDEN, bias=False), False),
    "gru_bidirectional_2_layers_states": (
        lambda: nn.GRU(FEATURES, HIDDEN, 2, batch_first=True, bidirectional=True),
        True,
    ),
    "rnn_tanh_2_layers": (lambda: nn.RNN(FEATURES, HIDDEN, 2), False),
    "rnn_relu_bidirectional_states": (
        lambda: nn.RNN(FEATURES, HIDDEN, nonlinearity="relu", batch_first=True, bidirectional=True),
        True,
    ),
}


def make(name: str) -> tuple[Recurrent, bool]:
    factory, with_states = CASES[name]
    torch.manual_seed(0)
    return Recurrent(factory()).eval(), with_states


def example(model: Recurrent, with_states: bool, seq: int = SEQ, batch: int = BATCH) -> tuple:
    rnn = model.rnn
    shape = (batch, seq, FEATURES) if rnn.batch_first else (seq, batch, FEATURES)
    x = torch.randn(*shape)
    if not with_states:
        return (x,)
    state = (rnn.num_layers * (2 if rnn.bidirectional else 1), batch, HIDDEN)
    return (x, torch.randn(*state)) + ((torch.randn(*state),) if isinstance(rnn, nn.LSTM) else ())


def check(module: runtime_lite.Module, model: Recurrent, inputs: tuple) -> None:
    with torch.no_grad():
        expected = model(*inputs)
    actual = module.run([v.numpy() for v in inputs])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == tuple(e.shape)
        np.testing.assert_allclose(a, e.numpy(), rtol=1e-5, atol=1e-5)


def ops(graph) -> list[str]:
    return [n.op for n in graph.nodes]


@pytest.mark.parametrize("name", list(CASES))
def test_matches_pytorch(name):
    model, with_states = make(name)
    inputs = example(model, with_states)
    program = torch.export.export(model, inputs)
    check(runtime_lite.load(aot.build(program, log=None).to_bytes()), model, inputs)


@pytest.mark.parametrize("name", ["lstm_bidirectional_2_layers", "gru_bidirectional_2_layers_states"])
def test_the_call_is_converted_whole_and_unrolled_once_per_layer_and_direction(name):
    """No decomposition by torch (it would trace a cell per step): one matmul for every step's input, then one per
    step for the state, in each of the 2 layers and 2 directions."""
    model, with_states = make(name)
    program = torch.export.export(model, example(model, with_states))
    assert _decompose_unknown(program) is program
    graph = from_exported_program(program)
    assert ops(graph).count("matmul") == 2 * 2 * (1 + SEQ)
    assert "recurrent" not in ops(graph)


def test_torch_export_fixes_a_recurrent_sequence_length():
    """torch 2.13's export fixes an LSTM's sequence length (tracing it walks the steps) and refuses a ``Dim`` on it,
    so the converter unrolls. The ``recurrent`` op's time loop, which a run-time length would take, is tested
    through ONNX's LSTM (tests/test_dynamic_recurrent.py); once torch keeps the length symbolic this fails, and the
    torch route's time loop wants its test here."""
    model, with_states = make("lstm_batch_first_2_layers_states")
    inputs = example(model, with_states)
    dynamic = ({1: torch.export.Dim("seq", max=64)},) + (None,) * (len(inputs) - 1)
    with pytest.raises(torch._dynamo.exc.UserError, match="specialized it to be a constant"):
        torch.export.export(model, inputs, dynamic_shapes=dynamic)


def test_a_dynamic_batch_with_the_zero_state_torch_makes_for_it():
    model, _ = make("lstm_bidirectional_2_layers")
    program = torch.export.export(
        model, example(model, False), dynamic_shapes=({0: torch.export.Dim("batch", max=32)},)
    )
    module = runtime_lite.load(aot.build(program, log=None).to_bytes())
    assert isinstance(module.inputs[0].shape[0], str)
    for batch in (1, 4):
        check(module, model, example(model, False, batch=batch))


def test_lstm_projections_are_refused_in_one_line():
    torch.manual_seed(0)
    model = Recurrent(nn.LSTM(FEATURES, HIDDEN, proj_size=4)).eval()
    program = torch.export.export(model, example(model, False))
    with pytest.raises(UnsupportedOpsError, match=r"aten\.lstm\.input node '\w+': proj_size > 0") as info:
        from_exported_program(program)
    assert "\n" not in str(info.value)


def test_dropout_in_training_mode_is_refused_in_one_line():
    torch.manual_seed(0)
    model = Recurrent(nn.LSTM(FEATURES, HIDDEN, 2, dropout=0.5)).train()
    program = torch.export.export(model, example(model, False))
    with pytest.raises(UnsupportedOpsError, match=r"aten\.lstm\.input node '\w+': train=True with dropout=0\.5"):
        from_exported_program(program)
