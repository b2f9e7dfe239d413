"""Programs the tracing tests share (tests/test_functional_dispatch.py,
tests/test_proxy_dispatch.py): a graph and a whole AOTAutograd trace described as
comparable text, a compiled encoder layer's graphs, and random functions of views,
in-place ops, reductions and multi-output ops.
"""
from __future__ import annotations

import random

import torch
from functorch.compile import aot_function, make_boxed_func

from fastfake.core import selftest as _selftest


def describe(gm) -> str:
    """A graph's code and every node's meta (sequence numbers counted from the
    graph's first, the ids of Dynamo's graph objects in ``from_node`` left out)."""
    import re

    text = repr((gm.code, _selftest._relative_seq_nr([_selftest._graph_description(gm)])))
    return re.sub(r"graph_id=\d+", "graph_id=...", text)


_ENCODER: list = []


def compiled_encoder(dynamic: bool) -> list[str]:
    """The graphs (:func:`describe`) of a ``TransformerEncoderLayer`` compiled with
    aot_eager's no-op compilers, forward and backward, from a reset Dynamo."""
    from torch._dynamo.backends.common import aot_autograd

    graphs: list = []

    def boxed(gm, example_inputs):
        graphs.append(describe(gm))
        return make_boxed_func(gm)

    if not _ENCODER:  # (one module for every call: node meta names modules by id)
        torch.manual_seed(0)
        _ENCODER.append((torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
                         torch.randn(2, 5, 16)))
    model, x = _ENCODER[0]
    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=boxed, bw_compiler=boxed)
    torch.compile(model, backend=backend, dynamic=dynamic)(x).sum().backward()
    return graphs


def trace(fn, inputs, dynamic: bool) -> str:
    # (from empty caches: stock's own cache hit of aten.copy on a view answers
    # another storage offset than its miss, so a trace's metadata depends on what
    # the process traced before, with or without fastfake)
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode.cache_clear()
    graphs: list = []

    def boxed(gm, example_inputs):
        graphs.append((gm.code, _selftest._graph_description(gm)))
        return make_boxed_func(gm)

    res = aot_function(fn, fw_compiler=boxed, bw_compiler=boxed, dynamic=dynamic)(*inputs)
    outs = res if isinstance(res, (tuple, list)) else (res,)
    loss = sum(o.float().sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)
    if isinstance(loss, torch.Tensor):
        loss.backward()
    return repr(([c for c, _ in graphs], _selftest._relative_seq_nr([g for _, g in graphs]),
                 [tuple(o.shape) for o in outs if isinstance(o, torch.Tensor)]))


def program(rng: random.Random):
    """A random function of views, in-place ops on views and bases, reductions,
    multi-output ops, lists and scalars."""
    steps = []
    for _ in range(rng.randint(4, 14)):
        steps.append(rng.choice([
            "v = v.view(-1, 4).t().contiguous().t()",
            "v = v * 2 + v.sum(dim=0, keepdim=True)",
            "v = torch.cat(list(torch.split(v, 2, dim=1)), dim=1)",
            "a, b = torch.max(v, 1); v = v + a.unsqueeze(1) + b.unsqueeze(1).float()",
            "w = v.clone(); w[1:].mul_(3); v = v + w",
            "w = v.clone(); u = w[:2]; w.add_(1); v = v + w + u.sum()",
            "v = torch.nn.functional.layer_norm(v, (4,))",
            "v = torch.where(v > 0, v, 0.25).relu()",
            "v = v.unsqueeze(0).expand(2, -1, -1).sum(0)",
            "v = torch.nn.functional.gelu(v) @ torch.ones(4, 4, device=v.device)",
            "v = v.transpose(0, 1).reshape(4, -1).transpose(0, 1)",
            "v = v.new_zeros(v.shape).index_put_((torch.tensor([0]),), v[0]) + v",
            "v = torch.stack([v, v * 0.5]).mean(0)",
            "v = (v.to(torch.float64) / 3).to(torch.float32)",
        ]))
    src = "def f(x, y):\n    v = x + y\n" + "".join(f"    {s}\n" for s in steps) + "    return v, v.sum()\n"
    ns: dict = {"torch": torch}
    exec(src, ns)  # noqa: S102
    return ns["f"], src
