"""A model as a function of its parameters and inputs, and its ``make_fx`` trace:
shared by the make_fx and the FakeTensorProp workloads."""
from __future__ import annotations

from typing import Callable

import torch


def _param_inputs(model: torch.nn.Module, requires_grad: bool):
    names, tensors = [], []
    for n, p in model.named_parameters():
        names.append(n)
        tensors.append(p.detach().requires_grad_(requires_grad))
    for n, b in model.named_buffers():
        names.append(n)
        tensors.append(b)
    return names, tensors


def _functional(model: torch.nn.Module, names: list[str]) -> Callable:
    n = len(names)

    def f(*args):
        state = dict(zip(names, args[:n]))
        return torch.func.functional_call(model, state, tuple(args[n:]))

    return f


def trace_functional(model, inputs, tracing_mode: str):
    """``make_fx`` of the functional forward under ``no_grad``: (graph module, its
    parameters and buffers, in placeholder order)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    model.eval()
    names, tensors = _param_inputs(model, requires_grad=False)
    with torch.no_grad():
        gm = make_fx(_functional(model, names), tracing_mode=tracing_mode)(*tensors, *inputs)
    return gm, tensors
