"""Programs of SymInt arithmetic the symbolic tracing tests share
(tests/test_sym_register.py, tests/test_sym_dispatch.py): random functions of a
make_fx symbolic trace's sizes, and a trace described as comparable text with its
ShapeEnv's state.
"""
from __future__ import annotations

import operator
import random

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from aot_programs import describe


def env_state(gm) -> tuple:
    env = next(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder").shape[0].node.shape_env
    return (
        [str(g.expr) for g in env.guards],
        sorted((str(k), str(v)) for k, v in env.replacements.items()),
        sorted((str(k), str(v)) for k, v in env.var_to_range.items()),
        sorted((str(k), [str(r.expr) for r in v]) for k, v in env.deferred_runtime_asserts.items()),
    )


def sym_traced(fn, inputs) -> tuple:
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode.cache_clear()
    gm = make_fx(fn, tracing_mode="symbolic")(*inputs)
    return describe(gm), env_state(gm)


_OPS = (operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, torch.sym_max, torch.sym_min)


def random_sym_program(rng: random.Random):
    """A function of SymInt arithmetic on its inputs' sizes (sizes made from the
    results, comparisons that guard, unused results, results multiplied by one),
    and the text that names it."""
    steps = []
    for _ in range(rng.randint(3, 10)):
        op = rng.choice(_OPS)
        steps.append((op, rng.randrange(100), rng.randrange(100), rng.randint(1, 3), rng.random()))

    def fn(x, y):
        vals = [x.shape[0], x.shape[1], y.shape[0]]
        outs = []
        for op, i, j, c, p in steps:
            a, b = vals[i % len(vals)], vals[j % len(vals)]
            if op in (operator.floordiv, operator.mod):
                b = b + c  # (never zero)
            elif p < 0.3:
                b = c
            v = op(a, b)
            if p < 0.15:
                v = v * 1
            vals.append(v)
            if p > 0.8:
                outs.append(torch.zeros(v % 5 + 1, device=x.device))  # a size from it
            if 0.6 < p < 0.7 and v > 3:  # (a guard)
                outs.append(x.sum() + 1)
        outs.append(x.reshape(x.shape[0] * x.shape[1]) * 2)
        return outs

    return fn, repr(steps)
