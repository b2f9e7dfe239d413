"""bench/layers.py: the layer table read off a cProfile of a real trace."""
from __future__ import annotations

import cProfile
import pstats

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from bench import layers


def _profiled(fn, *args) -> pstats.Stats:
    prof = cProfile.Profile()
    prof.enable()
    fn(*args)
    prof.disable()
    return pstats.Stats(prof)


def test_layers_of_a_make_fx_trace():
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(0)

    st = _profiled(lambda: make_fx(f, tracing_mode="fake")(torch.randn(4, 8), torch.randn(8, 3)))
    t = layers.table(st)
    proxy = t["`ProxyTorchDispatchMode.__torch_dispatch__`"]
    fake = t["`FakeTensorMode.__torch_dispatch__` (calls reaching Python)"]
    assert proxy[2] >= 3 and 0 < proxy[0] < 1  # mm, gelu, sum at least
    assert fake[2] >= 1 and fake[1] <= proxy[1]  # fake runs inside proxy here
    assert t["total profiled"][0] == 1.0 and t["total profiled"][1] == st.total_tt
    assert 0 < t["`torch.utils._pytree`, own time"][0] < 1
    # layers that did not run are not listed
    assert "Dynamo `get_fake_value`" not in t and "AOTAutograd partitioner" not in t
