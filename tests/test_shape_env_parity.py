"""The whole ShapeEnv after whole traces, stock against fastfake, in two processes.

Learned state that serves other ShapeEnvs (portable records, rerun entries) must
leave each ShapeEnv exactly as stock's own calls do, including the evaluation
caches that decide which guards later evaluations add (fastfake.parity.evals). The
per-call tests compare one call's effect; here many random programs are traced
at many sizes with make_fx, aot_function (forward and backward) and
torch.export in one process, and after every trace the graph code, the node
metadata and the ShapeEnv (guards in order, replacements, ranges, deferred
runtime asserts, divisibility, size-like symbols, unbacked bindings) are compared
with a stock process fed the same plan (tests/wholetrace.py; a longer run:
``python tests/wholetrace.py check --seed N --traces 400 --shrink``).
"""
from __future__ import annotations

import pytest
import sympy
import torch

import fastfake
import parity
import wholetrace
from fastfake.parity import crosscheck as _crosscheck
from fastfake.parity import evals as _evals

# The programs of the issue "a guard lost by a record learned in another
# ShapeEnv": the last trace's ShapeEnv lacked `Ne(s, Max(1, (s//2)))`.
FIRST = """def f(x, y, z, w):
    B, S, H = y.shape
    a = y.reshape(B, S, 2, H // 2).transpose(1, 2).contiguous().transpose(1, 2).reshape(B, S, H)
    b = torch.softmax(y, dim=-1)
    c = torch.cat([b, y], dim=1)[:, :S]
    d = c.reshape(-1, c.shape[-1])
    e = z.t().contiguous()
    return a, d, e"""
SECOND = """def f(x, y, z, w):
    B, S, H = x.shape
    a = x.to(torch.bfloat16).float() + 1
    b = x + z
    c = x + z
    d = F.layer_norm(b, (H,))
    e = x.reshape(B, S, 2, H // 2).transpose(1, 2).contiguous().transpose(1, 2).reshape(B, S, H)
    f = torch.addcmul(e, e, y, value=0.5)
    g = f * f
    h = d.masked_fill(d < 0, 0.0)
    i = g.cumsum(1)
    j = torch.nn.functional.gelu(i)
    k = x + z
    return h, j, k"""
ISSUE_PLAN = [{"src": FIRST, "B": B, "S": S, "tracer": "make_fx"} for B, S in [(2, 8), (2, 2), (3, 5)]] + [
    {"src": SECOND, "B": B, "S": S, "tracer": "make_fx"} for B, S in [(4, 1), (3, 5), (2, 8)]
]


def test_the_issue_plan_leaves_stock_s_shape_env():
    assert wholetrace.compare(ISSUE_PLAN) is None


@parity.requires_symbolic_cache  # (nothing symbolic is served to skip evaluations otherwise)
def test_skipping_the_evaluations_loses_the_guard():
    """The comparison can fail: served calls that skip the evaluations of stock's
    kernel (fastfake before the replays) end with a guard fewer."""
    found = wholetrace.compare(ISSUE_PLAN, env={"WHOLETRACE_EVAL_FAULT": "1"})
    assert found is not None
    i, diff, stats = found
    assert "shape_env.guards" in diff and "Max(1" in diff, diff
    assert stats.get("cache.symbolic.portable.served", 0) > 0, stats


@pytest.mark.parametrize("seed", [11, 12])
def test_random_whole_traces(seed, monkeypatch):
    """Random programs and sizes, three tracers, one process per world."""
    plan = wholetrace.make_plan(seed, 45)
    monkeypatch.setenv("PYTHONHASHSEED", str(seed))  # both worlds hash alike, reproducibly
    found = wholetrace.compare(plan)
    if found is not None:
        i, diff, _ = found
        pytest.fail(f"trace {i} ({plan[i]['tracer']}, B={plan[i]['B']}, S={plan[i]['S']}) differs: {diff}\n"
                    f"{plan[i]['src']}\nshrink: PYTHONHASHSEED={seed} python tests/wholetrace.py check --seed {seed} "
                    "--traces 45 --shrink")


def _run_issue_in_process() -> None:
    for item in ISSUE_PLAN:
        out = wholetrace.run_trace(item)
        if "error" in out:
            kind, msg = out["error"]
            raise (fastfake.CrosscheckError if kind == "CrosscheckError" else RuntimeError)(msg)


@parity.requires_symbolic_cache
def test_crosscheck_names_evaluations_a_served_call_skipped(installed):
    fastfake.uninstall()
    fastfake.cache_clear()
    fastfake.install(crosscheck=True)
    try:
        _run_issue_in_process()  # served calls replay: stock's verifying calls agree
        fastfake.cache_clear()
        _run_issue_in_process()  # (records learned again)
        _evals.inject_fault(10**9)
        with pytest.raises(fastfake.CrosscheckError, match="evaluations the fast path did not make"):
            _run_issue_in_process()
    finally:
        _evals.inject_fault(0)
        fastfake.uninstall()
        fastfake.install()


def test_crosscheck_sees_a_guard_stock_adds(monkeypatch):
    """A stock verifying call that adds a guard (here a stand-in for stock's
    dispatch) is a difference, named by the guard."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    import parity

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = parity.symbolic_fake(mode, 3, 4)
    s = x.shape[0].node.expr
    with mode:
        fast = x + 1

    def stock_dispatch(self, func, types, args, kwargs):
        env.evaluate_expr(sympy.Gt(s, 2), True)
        return fast

    monkeypatch.setattr(FakeTensorMode, "dispatch", stock_dispatch)
    with pytest.raises(fastfake.CrosscheckError, match=r"guard .*> 2"):
        _crosscheck.check(mode, torch.ops.aten.add.Tensor, (), (x, 1), {}, fast)
    # nothing added: no difference
    assert _crosscheck.check(mode, torch.ops.aten.add.Tensor, (), (x, 1), {}, fast)


def test_eval_wrappers_are_off_outside_learning():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    for name in _evals.NAMES:
        assert ShapeEnv.__dict__[name].__code__.co_name != "logged", name
    assert _evals._ACTIVE[0] == 0 and not _evals._LOG
