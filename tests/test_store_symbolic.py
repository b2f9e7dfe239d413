"""Records that serve other ShapeEnvs, kept on disk by one process and served in the
next (fastfake/store/symbolic.py, fastfake/store/symcodec.py, csrc/cache/entry_io.cpp).

What must hold: a second process that reads the first's records traces exactly what
stock traces (graph code, every node's metadata, and the whole ShapeEnv: guards in
order, replacements, ranges, deferred runtime asserts, divisibility, unbacked
bindings), and is served from them; the codec reads back exactly what it kept
(symbols with their assumptions in order, expressions as built, stock's stubs) and
refuses what it does not know; a corrupt file, a record edited under a recomputed
digest, a shared part that is missing or kept under another part's name are ignored
and counted, and the trace is still stock's; ``crosscheck=True`` serves from the file
and checks every such call against stock; it is off unless ``FASTFAKE_ENABLE`` names
it, and ``FASTFAKE_DISABLE`` turns it off.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sympy
import torch

import wholetrace
from fastfake.store import symbolic, symcodec, files

pytestmark = pytest.mark.skipif(not symbolic.available(), reason="the store is not proven on this release")

_SEEDS = (0, 1)


@pytest.fixture
def cache_dir(tmp_path):
    # the self-test result first (read by every process below, as a user's second
    # process reads it), without any learned records
    d = tmp_path / "cache"
    r = subprocess.run([sys.executable, "-c", "import torch, fastfake; fastfake.install()"], capture_output=True,
                       text=True, timeout=600, env={**os.environ, "FASTFAKE_CACHE_DIR": str(d),
                                                    "FASTFAKE_DISABLE": "store,store_symbolic"})
    assert r.returncode == 0, r.stderr[-2000:]
    return d


def _symbolic_file(cache_dir) -> str:
    d = os.path.join(str(cache_dir), "store")
    names = [n for n in os.listdir(d) if n.endswith(".symbolic.json")]
    assert len(names) == 1, names
    return os.path.join(d, names[0])


def _plan(seed: int, traces: int = 24) -> list:
    return wholetrace.make_plan(seed, traces)


def _second_process(plan: list, cache_dir, **env: str):
    """The plan in a fastfake process that keeps its records, then the difference
    between a second one (reading them) and stock, and the second one's stats."""
    e = {"FASTFAKE_CACHE_DIR": str(cache_dir), "FASTFAKE_ENABLE": "store_symbolic", **env}
    first = wholetrace._run_process(plan, "fastfake", e)
    assert first
    return wholetrace.compare(plan, e), dict(wholetrace.LAST_STATS)


# --------------------------------------------------------------------------- #
# Two processes
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", _SEEDS)
def test_second_process_traces_what_stock_traces_and_is_served(cache_dir, seed):
    found, stats = _second_process(_plan(seed), cache_dir)
    assert found is None, found[:2]
    assert stats.get("store.symbolic.served", 0) > 0, stats


def test_crosscheck_serves_from_the_file_and_agrees(cache_dir):
    found, stats = _second_process(_plan(2, 12), cache_dir, FASTFAKE_CROSSCHECK="1")
    assert found is None, found[:2]
    assert stats.get("store.symbolic.served", 0) > 0, stats


@pytest.mark.parametrize("env", [{"FASTFAKE_ENABLE": ""}, {"FASTFAKE_DISABLE": "store_symbolic"}],
                         ids=["by default", "switched off"])
def test_off_keeps_and_serves_nothing(cache_dir, env):
    found, stats = _second_process(_plan(3, 8), cache_dir, **env)
    assert found is None, found[:2]
    assert not stats.get("store.symbolic.served"), stats
    d = os.path.join(str(cache_dir), "store")
    assert not os.path.isdir(d) or not any(n.endswith(".symbolic.json") for n in os.listdir(d))


# A dynamic=True torch.compile (Dynamo, AOTAutograd, a backend), in a process of its
# own: prints the Dynamo and AOT graphs' code and the ShapeEnv's state after each.
COMPILE = r"""
import json, os, sys
import torch
if os.environ["SYM_TEST_IMPL"] == "fastfake":
    import fastfake
    fastfake.install()
from torch._functorch.aot_autograd import aot_module_simplified
from torch._guards import TracingContext
out = []

def env_state():
    env = TracingContext.get().fake_mode.shape_env
    return [[str(g.expr) for g in env.guards], sorted((str(k), str(v)) for k, v in env.replacements.items()),
            sorted((str(k), str(v)) for k, v in env.var_to_range.items()),
            sorted(str(k) for k in env.divisible), env.num_deferred_runtime_asserts]

def backend(gm, example_inputs):
    out.append(["dynamo", gm.code, env_state()])
    def fw(g, _):
        out.append(["aot", g.code, env_state()])
        return g
    return aot_module_simplified(gm, example_inputs, fw_compiler=fw)

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(16)
        self.qkv = torch.nn.Linear(16, 48)
        self.o = torch.nn.Linear(16, 16)
    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln(x)).split(16, -1)
        q = q.view(b, s, 2, 8).transpose(1, 2)
        k = k.view(b, s, 2, 8).transpose(1, 2)
        v = v.view(b, s, 2, 8).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
        return x + self.o(a.transpose(1, 2).reshape(b, s, h))

torch.manual_seed(0)
m = torch.nn.Sequential(Block(), Block())
cf = torch.compile(m, backend=backend, dynamic=True)
y = cf(torch.randn(3, 5, 16))
y.sum().backward()
res = {"out": out}
if os.environ["SYM_TEST_IMPL"] == "fastfake":
    res["stats"] = {k: v for k, v in fastfake.stats().items() if k.startswith("store.symbolic") and v}
print("RESULT " + json.dumps(res))
"""


def _compile(impl: str, cache_dir) -> dict:
    e = {**os.environ, "SYM_TEST_IMPL": impl, "FASTFAKE_CACHE_DIR": str(cache_dir), "FASTFAKE_ENABLE": "store_symbolic"}
    r = subprocess.run([sys.executable, "-c", COMPILE], capture_output=True, text=True, timeout=900, env=e)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_second_compile_process_equals_stock(cache_dir):
    stock = _compile("stock", cache_dir)
    first = _compile("fastfake", cache_dir)
    second = _compile("fastfake", cache_dir)
    assert first["out"] == stock["out"]
    assert second["out"] == stock["out"]
    assert second["stats"].get("store.symbolic.served", 0) > 0, second["stats"]
    assert not first["stats"].get("store.symbolic.served"), first["stats"]


# --------------------------------------------------------------------------- #
# A bad file, a bad record
# --------------------------------------------------------------------------- #


def _rewrite(path: str, edit) -> None:
    with open(path) as f:
        data = json.load(f)
    records = json.loads(data["records"])
    records = edit(records)
    data["records"] = json.dumps(records, separators=(",", ":"))
    data["digest"] = files._digest(data["records"])
    with open(path, "w") as f:
        json.dump(data, f)


def _edit_parts(records: list) -> list:
    # every shared part kept under another part's name (a consistent edit: the
    # file's digest is recomputed)
    parts = [r for r in records if r[0].startswith("@")]
    names = [r[0] for r in parts]
    for r, n in zip(parts, names[1:] + names[:1]):
        r[0] = n
    return records


def _drop_parts(records: list) -> list:
    return [r for r in records if not r[0].startswith("@")]


def _wrong_class(records: list) -> list:
    text = json.dumps(records).replace("sympy.core.mul.Mul", "sympy.core.function.Lambda")
    return json.loads(text)


def _truncate(path: str) -> None:
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text[: len(text) // 2])


@pytest.mark.parametrize("fault", ["truncated", "parts swapped", "parts missing", "unknown class"])
def test_a_bad_file_or_record_is_ignored_and_counted(cache_dir, fault):
    plan = _plan(4, 10)
    e = {"FASTFAKE_CACHE_DIR": str(cache_dir), "FASTFAKE_ENABLE": "store_symbolic"}
    wholetrace._run_process(plan, "fastfake", e)
    path = _symbolic_file(cache_dir)
    if fault == "truncated":
        _truncate(path)
    else:
        _rewrite(path, {"parts swapped": _edit_parts, "parts missing": _drop_parts,
                        "unknown class": _wrong_class}[fault])
    found = wholetrace.compare(plan, e)
    assert found is None, found[:2]
    stats = dict(wholetrace.LAST_STATS)
    assert not stats.get("store.symbolic.served"), stats
    if fault == "truncated":
        assert stats.get("store.symbolic.file.corrupt", 0) >= 1, stats
    else:
        assert stats.get("store.symbolic.invalid", 0) >= 1, stats


# --------------------------------------------------------------------------- #
# The codec
# --------------------------------------------------------------------------- #


def _s(name: str, **a):
    return sympy.Symbol(name, **a)


def _random_arith(rng, depth: int = 0):
    from torch.utils._sympy.functions import FloorDiv, Mod

    syms = [_s("s0", positive=True, integer=True), _s("s1", integer=True, positive=True), _s("u0", integer=True)]
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(syms + [sympy.Integer(rng.randrange(-3, 9))])
    a, b = _random_arith(rng, depth + 1), _random_arith(rng, depth + 1)
    k = rng.randrange(5)
    if k == 0:
        return a + b
    if k == 1:
        return a * b
    if k == 2:
        return FloorDiv(a, syms[0])
    if k == 3:
        return Mod(a, syms[1])
    return a * 3 - b


def _random_expr(rng):
    a, b = _random_arith(rng), _random_arith(rng)
    k = rng.randrange(5)
    if k == 0:
        return sympy.Eq(a, b)
    if k == 1:
        return sympy.Lt(a, b + 1)
    if k == 2:
        return sympy.Ne(a, 0)
    return a


@pytest.mark.parametrize("seed", range(4))
def test_codec_keeps_expressions_as_built(seed):
    import random

    rng = random.Random(seed)
    kept = 0
    for _ in range(300):
        x = _random_expr(rng)
        enc = symcodec.keepable(x)
        if enc is symcodec._MISSING:
            continue
        kept += 1
        back = symcodec.decode(json.loads(json.dumps(enc)))
        assert back == x and type(back) is type(x) and hash(back) == hash(x)
        assert sympy.srepr(back) == sympy.srepr(x)
    assert kept > 200


def test_codec_keeps_the_order_of_a_symbol_s_assumptions():
    a = _s("s7", integer=True, positive=True)
    back = symcodec.decode(json.loads(json.dumps(symcodec.keepable(a))))
    assert sympy.srepr(back) == sympy.srepr(a)
    assert list(back._assumptions_orig) == ["integer", "positive"]


def test_codec_keeps_infinities_and_types_exactly():
    from torch.utils._sympy.numbers import int_oo

    for v in (int_oo, -int_oo, sympy.oo, sympy.true, sympy.false, sympy.Integer(3), 3, True, 1.5, None,
              (int, float, bool), torch.SymInt, frozenset({sympy.Integer(2), _s("s0", integer=True)})):
        back = symcodec.decode(json.loads(json.dumps(symcodec.keepable(v))))
        assert symcodec.same(back, v), v
    assert not symcodec.same(sympy.Integer(3), 3)
    assert not symcodec.same(True, 1)


@pytest.mark.parametrize("value", [
    ["X", "sympy.core.function.Lambda", []],
    ["X", "builtins.eval", [["I", 1]]],
    ["S", "s0", [["positive", "yes"]]],
    ["@", "0" * 24],
    ["ds", ["ty", "builtins.int"], None],
    ["nope"],
])
def test_codec_refuses_what_it_does_not_know(value):
    with pytest.raises(symcodec.Invalid):
        symcodec.decode(value)


def test_a_shared_part_must_match_its_digest():
    parts: dict = {}
    x = symcodec.pool(symcodec.encode(sympy.Eq(_s("s0", integer=True) * 4, _s("s1", integer=True) + 3)), parts)
    assert x[0] == "@" and parts
    symcodec._SHARED.clear()
    (d, part), = [(d, p) for d, p in parts.items() if d == x[1]]
    symcodec._PARTS[0] = {x[1]: ["t", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]]}
    try:
        with pytest.raises(symcodec.Invalid):
            symcodec.decode(x)
        symcodec._PARTS[0] = parts
        assert symcodec.decode(x) == sympy.Eq(_s("s0", integer=True) * 4, _s("s1", integer=True) + 3)
    finally:
        symcodec._PARTS[0] = None
        symcodec._SHARED.clear()


def test_the_two_process_check_finds_a_served_call_that_differs(cache_dir):
    # testing the test: in the second process the records read from the file serve
    # without replaying the ShapeEnv evaluations stock's kernel makes (guards stock
    # adds are then missing); the comparison with stock must see it
    from test_shape_env_parity import ISSUE_PLAN

    found, stats = _second_process(ISSUE_PLAN, cache_dir, WHOLETRACE_EVAL_FAULT="1")
    assert found is not None
    i, diff, stats = found
    assert "shape_env.guards" in diff, diff
    assert stats.get("store.symbolic.served", 0) > 0, stats


def test_the_issue_plan_in_a_second_process_leaves_stock_s_shape_env(cache_dir):
    from test_shape_env_parity import ISSUE_PLAN

    found, stats = _second_process(ISSUE_PLAN, cache_dir)
    assert found is None, found[:2]
    assert stats.get("store.symbolic.served", 0) > 0, stats
