"""Non-fake tensor arguments under FakeTensorMode(allow_non_fake_inputs=True).

A real-weight model run on fake inputs (shape-inference tools, quick experiments):
fastfake converts the real arguments with the mode's own converter, as stock does,
and serves the converted calls. Results, the converter's memo (the same FakeTensor
for the same real tensor) and stock's errors must be stock's.
"""
from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, fake_tensor_tls

import fastfake
import parity


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.fc1 = torch.nn.Linear(16, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.fc2 = torch.nn.Linear(32, 16)
        self.conv = torch.nn.Conv1d(16, 16, 3, padding=1)
        self.register_buffer("scale", torch.full((16,), 0.5))

    def forward(self, ids):
        x = self.emb(ids)
        h = self.fc2(self.ln(torch.nn.functional.gelu(self.fc1(x))))
        h = self.conv(h.transpose(1, 2)).transpose(1, 2)
        return torch.softmax((h + x) * self.scale, -1).sum(-1)


def _program(model):
    def run(mode):
        w = model.fc1.weight
        conv = mode.fake_tensor_converter.from_real_tensor(mode, w)  # held: stays memoised
        with mode:
            ids = torch.randint(0, 50, (2, 7))
            out = model(ids)
            wt = w.t()
            values = [out, wt, model.scale * 2, torch.cat([model.scale, model.scale])]
        # The memo answers as stock's: the same FakeTensor for the same real tensor.
        # (Its internal ids are not compared: stock computes every call with a real
        # argument on its uncached path, which also memoises each meta output; its
        # cache hits, like fastfake's served results, do not.)
        memo = mode.fake_tensor_converter.from_real_tensor(mode, w) is conv
        return values, memo

    return run


def _describe(value):
    return [parity.tensor_meta(t) for t in value]


def test_real_weight_model_as_stock():
    torch.manual_seed(0)
    model = _Block()
    run = _program(model)
    fastfake.uninstall()
    stock, stock_memo = run(FakeTensorMode(allow_non_fake_inputs=True))
    fastfake.install()
    fastfake.reset_stats()
    fast = [run(FakeTensorMode(allow_non_fake_inputs=True)) for _ in range(3)]
    s = fastfake.stats()
    assert stock_memo is True
    for value, memo in fast:
        assert _describe(value) == _describe(stock)
        assert memo == stock_memo
    assert s["real_inputs.converted"] > 0
    assert s["cache.hit"] + s["elementwise.hit"] > 30, s
    assert s["cache.bypass.non_fake_tensor"] == 0 and s["elementwise.fallback.non_fake_tensor"] == 0, s


def test_crosscheck_over_a_real_weight_model():
    torch.manual_seed(0)
    model = _Block()
    fastfake.install(crosscheck=True)
    for _ in range(2):
        _program(model)(FakeTensorMode(allow_non_fake_inputs=True))
    s = fastfake.stats()
    assert s["crosscheck.checked"] > 30 and s["crosscheck.mismatch"] == 0, s


def _outcome(fn):
    try:
        return ("ok", parity.tensor_meta(fn()))
    except Exception as e:  # noqa: BLE001
        return ("error", type(e).__name__, str(e).split(" Found in")[0])


@pytest.mark.parametrize(
    "case",
    ["not_allowed", "inplace_view", "numbers_real_only", "inplace_real_self", "override_off", "override_on"],
)
def test_stock_paths_and_errors(case):
    """Where stock does something else with real arguments, the result (or error)
    is stock's."""
    def run():
        w = torch.randn(4, 3)  # fresh: an in-place call bumps the real tensor's version
        s0 = torch.tensor(2.0)
        allow = case not in ("not_allowed", "override_on")
        mode = FakeTensorMode(allow_non_fake_inputs=allow)
        with mode:
            x = torch.empty(4, 3)
            if case == "override_off" or case == "override_on":
                fake_tensor_tls.allow_non_fake_inputs_override = case == "override_on"
            try:
                if case in ("not_allowed", "override_off", "override_on"):
                    return _outcome(lambda: x + w)
                if case == "inplace_view":
                    return _outcome(lambda: w.t_())
                if case == "numbers_real_only":
                    return _outcome(lambda: s0 * 3)  # constant propagation on the real values
                return _outcome(lambda: w.add_(x))
            finally:
                fake_tensor_tls.allow_non_fake_inputs_override = None

    fastfake.uninstall()
    stock = run()
    fastfake.install()
    run()
    assert run() == stock
