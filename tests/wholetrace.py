"""Whole-trace differential testing: many random programs and sizes traced in one
process, compared with a stock process fed the same sequence.

The per-call stateful tests (test_stateful.py) compare each call's outputs; here the
unit is a whole trace, and what is compared after each one is everything a user of
the trace sees: the graph code, every node's metadata, and the ShapeEnv the trace
leaves (guards in order, replacements, value ranges, deferred runtime asserts,
divisibility, unbacked bindings). State that fastfake learns in one trace (records
that serve other ShapeEnvs, memos, signatures) is exercised by the traces after it,
as in a real process that compiles many things.

A *plan* is a list of traces: (program source, sizes, tracer). Each world runs the
plan in a fresh process (``python tests/wholetrace.py run PLAN.json --world stock``)
and writes one JSON line per trace; the two files are compared line by line.

    python tests/wholetrace.py check --seed 3 --traces 120           # one seeded plan
    python tests/wholetrace.py check --seed 3 --traces 120 --shrink  # and shrink a failure

``check`` exits 1 on a difference, printing the first differing trace, its program and
the difference; ``--shrink`` then removes traces and program steps while the
difference stays, and prints a standalone repro.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from typing import Any

H = 8  # the static hidden size; B and S are dynamic

# ---------------------------------------------------------------------------
# Random programs. Values carry a kind: the symbolic layout of their shape.
#   BSH: (B, S, H)   SH: (S, H)   BS: (B, S)   BSS: (B, S, S)   NH: (B*S, H)
#   B2SQ: (B, 2, S, H//2)   S: (S,)
# Each step appends one line `vN = ...` to the program and one value to the pool.
# ---------------------------------------------------------------------------

_UNARY = ["torch.relu({a})", "torch.exp({a})", "torch.sigmoid({a})", "torch.tanh({a})",
          "F.gelu({a})", "-{a}", "{a} * 0.5", "{a}.abs()", "torch.sin({a})"]
_BINARY = ["{a} + {b}", "{a} * {b}", "{a} - {b}", "torch.maximum({a}, {b})",
           "torch.where({a} > 0, {a}, {b})", "torch.addcmul({a}, {a}, {b}, value=0.5)"]


def _steps_for(kind: str) -> list[tuple[str, str]]:
    """(code template over {a} (and {b} of the same kind / {s} of kind SH), result kind)."""
    out: list[tuple[str, str]] = [(u, kind) for u in _UNARY]
    out += [(b, kind) for b in _BINARY]
    if kind == "BSH":
        out += [
            ("{a} + {s}", "BSH"),  # broadcasting over B
            ("{a}.reshape({a}.shape[0], {a}.shape[1], 2, {H} // 2).transpose(1, 2).contiguous()", "B2SQ"),
            ("{a}.reshape({a}.shape[0], {a}.shape[1], 2, {H} // 2).transpose(1, 2).contiguous()"
             ".transpose(1, 2).reshape({a}.shape[0], {a}.shape[1], {H})", "BSH"),
            ("torch.softmax({a}, dim=-1)", "BSH"),
            ("torch.log_softmax({a}, dim=1)", "BSH"),
            ("F.layer_norm({a}, ({H},))", "BSH"),
            ("{a}.cumsum(1)", "BSH"),
            ("{a}.masked_fill({a} < 0, 0.0)", "BSH"),
            ("{a}.to(torch.bfloat16).float()", "BSH"),
            ("({a} > 0).to(torch.float32)", "BSH"),
            ("torch.cat([{a}, {b}], dim=1)[:, :{a}.shape[1]]", "BSH"),
            ("torch.cat([{a}, {b}], dim=0)[:{a}.shape[0]]", "BSH"),
            ("torch.cat([{a}, {b}], dim=2).narrow(2, 0, {H})", "BSH"),
            ("{a}.split(2, dim=2)[1].repeat(1, 1, 4)", "BSH"),
            ("{a}.reshape(-1, {a}.shape[-1])", "NH"),
            ("{a} @ {w}", "BSH"),
            ("torch.bmm({a}, {b}.transpose(1, 2))", "BSS"),
            ("{a}.sum(-1)", "BS"),
            ("{a}.mean(1, keepdim=True).expand_as({a})", "BSH"),
            ("{a}.amax(-1, keepdim=True) - {a}", "BSH"),
            ("{a}.var(-1)", "BS"),
            ("{a} * torch.arange({a}.shape[1], dtype={a}.dtype).unsqueeze(-1)", "BSH"),
            ("{a}.new_zeros({a}.shape) + {a}", "BSH"),
            ("{a}.flip(1)", "BSH"),
            ("{a}[:, 1:] if {a}.shape[1] > 1 else {a}", "BSH"),
            ("{a}.transpose(0, 1).contiguous().transpose(0, 1)", "BSH"),
            ("{a}.unsqueeze(1).squeeze(1)", "BSH"),
            ("{a}[..., : {H} // 2].repeat_interleave(2, dim=-1)", "BSH"),
            ("torch.index_select({a}, 1, torch.arange({a}.shape[1] - 1, -1, -1))", "BSH"),
            ("{a}[:, : max({a}.shape[1] // 2, 1)].repeat(1, 2, 1)[:, : {a}.shape[1]]", "BSH"),
            ("{a}.chunk(2, dim=1)[0].sum(1, keepdim=True) + {a}", "BSH"),
            ("F.pad({a}, (0, 0, 0, 1))[:, 1:]", "BSH"),
            ("{a}.unfold(1, 2, 1).sum(-1)", "BSH2"),
            ("torch.cat([{a}, {b}], dim=1).reshape({a}.shape[0], {a}.shape[1], 2 * {H})[..., :{H}]", "BSH"),
            ("{a}.reshape({a}.shape[0], -1)", "BX"),
        ]
    elif kind == "SH":
        out += [("{a}.t().contiguous().t()", "SH"), ("{a}.sum(0)", "H"), ("{a}.cumsum(0)", "SH"),
                ("torch.softmax({a}, 0)", "SH"), ("{a} @ {w}", "SH"), ("{a}.t() @ {a}", "HH")]
    elif kind == "BS":
        out += [("{a}.unsqueeze(-1).expand(-1, -1, {H}).contiguous()", "BSH"), ("{a}.cumsum(1)", "BS"),
                ("{a}.t().contiguous().t()", "BS"), ("torch.softmax({a}, -1)", "BS")]
    elif kind == "BSS":
        out += [("torch.softmax({a}, -1)", "BSS"), ("{a}.tril()", "BSS"), ("{a}.sum(-1)", "BS"),
                ("{a}.transpose(1, 2)", "BSS")]
    elif kind == "NH":
        out += [("{a}.view({x}.shape[0], -1, {H})", "BSH"), ("{a} @ {w}", "NH"), ("{a}.sum(0)", "H")]
    elif kind == "BSH2":
        out += [("F.pad({a}, (0, 0, 0, 1))", "BSH"), ("{a}.transpose(1, 2).contiguous()", "BHS")]
    elif kind == "BX":
        out += [("{a}.view({x}.shape[0], {x}.shape[1], {H})", "BSH"), ("{a}.cumsum(1)", "BX"),
                ("{a}[:, ::2]", "BX2")]
    elif kind == "B2SQ":
        out += [("{a}.transpose(1, 2).reshape({x}.shape[0], {x}.shape[1], {H})", "BSH"),
                ("{a}.sum(1)", "BSQ")]
    return out


def make_program(rng: random.Random, n_steps: int) -> str:
    """A function `f(x, y, z, w)` (x, y: BSH; z: SH; w: HH) of ``n_steps`` random steps
    returning a few of the values it made."""
    pool: list[tuple[str, str]] = [("x", "BSH"), ("y", "BSH"), ("z", "SH")]
    lines = ["def f(x, y, z, w):"]
    for i in range(n_steps):
        name, kind = rng.choice(pool)
        steps = _steps_for(kind)
        tmpl, result = rng.choice(steps)
        same = [p for p, k in pool if k == kind]
        code = tmpl.format(a=name, b=rng.choice(same), s="z", w="w", x="x", H=H)
        v = f"v{i}"
        lines.append(f"    {v} = {code}")
        pool.append((v, result))
    made = [p for p, _ in pool[3:]] or ["x"]
    outs = rng.sample(made, min(len(made), rng.randint(1, 3)))
    lines.append(f"    return ({', '.join(outs)},)")
    return "\n".join(lines)


_SIZES = [(2, 3), (3, 5), (4, 4), (2, 8), (5, 2), (2, 2), (3, 7), (1, 4), (4, 1), (6, 3), (0, 3)]
TRACERS = ("make_fx", "aot", "export")


def make_plan(seed: int, traces: int, tracers: tuple[str, ...] = TRACERS) -> list[dict]:
    """``traces`` traces over a few programs, each traced at several sizes (the
    repetitions are what learned state serves), tracers mixed."""
    rng = random.Random(seed)
    programs = [make_program(rng, rng.randint(3, 10)) for _ in range(max(2, traces // 4))]
    plan = []
    for _ in range(traces):
        src = rng.choice(programs)
        B, S = rng.choice(_SIZES)
        plan.append({"src": src, "B": B, "S": S, "tracer": rng.choice(tracers)})
    return plan


# ---------------------------------------------------------------------------
# One world: run a plan in this process and describe every trace.
# ---------------------------------------------------------------------------

def _shape_env_of(gm: Any) -> Any:
    import torch

    for n in gm.graph.nodes:
        v = n.meta.get("val")
        for t in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(t, torch.Tensor) and getattr(t, "fake_mode", None) is not None:
                return t.fake_mode.shape_env
            if isinstance(t, torch.SymInt):
                return t.node.shape_env
    return None


def _meta_value(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        return {"shape": [str(s) for s in v.shape], "stride": [str(s) for s in v.stride()],
                "offset": str(v.storage_offset()), "dtype": str(v.dtype), "device": str(v.device),
                "requires_grad": v.requires_grad}
    if isinstance(v, (list, tuple)):
        return [_meta_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _meta_value(x) for k, x in v.items()}
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"{type(v).__name__}({v.node.expr})"
    if isinstance(v, (int, float, bool, str)) or v is None:
        return v
    return type(v).__name__


_META_SKIP = {"stack_trace", "source_fn_stack", "nn_module_stack", "original_aten", "from_node",
              "seq_nr", "partitioner_tag"}


def _target(t: Any) -> str:
    if callable(t) and hasattr(t, "__qualname__") and not hasattr(t, "_schema"):
        return f"{getattr(t, '__module__', '')}.{t.__qualname__}"
    return str(t)


def describe_graph(gm: Any) -> dict:
    nodes = []
    for n in gm.graph.nodes:
        meta = {k: _meta_value(v) for k, v in sorted(n.meta.items()) if k not in _META_SKIP}
        meta["keys"] = sorted(n.meta)
        nodes.append([n.name, n.op, _target(n.target), meta])
    return {"code": gm.code, "nodes": nodes}


def describe_shape_env(env: Any) -> dict:
    if env is None:
        return {}
    return {
        "guards": [str(g.expr) for g in env.guards],
        "replacements": sorted((str(k), str(v)) for k, v in env.replacements.items()),
        "var_to_range": sorted((str(k), str(v)) for k, v in env.var_to_range.items()),
        "deferred_runtime_asserts": sorted(
            (str(k), [str(r.expr) for r in v]) for k, v in env.deferred_runtime_asserts.items()
        ),
        "divisible": sorted(str(d) for d in env.divisible),
        "size_like": sorted(str(s) for s in env.size_like),
        "axioms": len(env.axioms),
    }


def run_trace(item: dict) -> dict:
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    ns: dict = {"torch": torch, "F": torch.nn.functional}
    exec(item["src"], ns)
    f = ns["f"]
    B, S = item["B"], item["S"]
    g = torch.Generator().manual_seed(B * 100 + S)
    args = [torch.randn(B, S, H, generator=g), torch.randn(B, S, H, generator=g),
            torch.randn(S, H, generator=g), torch.randn(H, H, generator=g)]
    tracer = item["tracer"]
    out: dict = {"tracer": tracer}
    try:
        if tracer == "make_fx":
            gm = make_fx(f, tracing_mode="symbolic")(*args)
            out["graphs"] = [describe_graph(gm)]
            out["shape_env"] = describe_shape_env(_shape_env_of(gm))
        elif tracer == "aot":
            from functorch.compile import aot_function

            graphs: list = []

            def compiler(gm, example_inputs):
                graphs.append(gm)
                return gm

            for a in args:
                a.requires_grad_(True)
            fn = aot_function(f, fw_compiler=compiler, bw_compiler=compiler, dynamic=True)
            res = fn(*args)
            loss = sum(r.float().sum() for r in res if r.is_floating_point() and r.requires_grad)
            if isinstance(loss, torch.Tensor) and loss.requires_grad:
                loss.backward()
            out["graphs"] = [describe_graph(gm) for gm in graphs]
            out["shape_env"] = describe_shape_env(_shape_env_of(graphs[0]) if graphs else None)
        else:
            from torch.export import Dim, export

            class M(torch.nn.Module):
                def forward(self, x, y, z, w):
                    return f(x, y, z, w)

            dims = ({0: Dim.AUTO, 1: Dim.AUTO}, {0: Dim.AUTO, 1: Dim.AUTO}, {0: Dim.AUTO}, None)
            ep = export(M(), tuple(args), dynamic_shapes=dims)
            gm = ep.graph_module
            out["graphs"] = [describe_graph(gm)]
            out["range_constraints"] = sorted((str(k), str(v)) for k, v in ep.range_constraints.items())
            out["shape_env"] = describe_shape_env(_shape_env_of(gm))
    except Exception as e:  # noqa: BLE001 - stock's error is part of the outcome
        msg = str(e).split("\n")[0][:300]
        out["error"] = [type(e).__name__, msg]
    return out


def _pin_stock_order() -> None:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:
        sys.path.insert(0, root)
    from bench import determinism

    determinism.pin()


def run_world(plan: list[dict], world: str, out_path: str) -> None:
    import torch

    torch.manual_seed(0)
    if world == "fastfake":
        import fastfake

        fastfake.install()
        if os.environ.get("WHOLETRACE_EVAL_FAULT"):
            # testing the test: served calls skip the evaluations of stock's kernel
            from fastfake.parity import evals as _evals

            _evals.inject_fault(10**9)
    elif world != "stock":
        raise SystemExit(f"unknown world {world!r}")
    # stock's address-dependent order, fixed alike in both worlds before anything is
    # traced; after install(), as the benchmark's children do, so that install()
    # proves stock's own code (the pinned function is called where stock calls it)
    _pin_stock_order()
    import logging
    import warnings

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    with open(out_path, "w") as fh:
        for item in plan:
            fh.write(json.dumps(run_trace(item), sort_keys=True) + "\n")
            fh.flush()
        if world == "fastfake":
            import fastfake

            served = {k: v for k, v in fastfake.stats().items() if v and (
                k.startswith(("cache.symbolic.portable.served", "store.symbolic")) or k in (
                    "cache.hits", "elementwise.hits", "functional_dispatch.served", "proxy_dispatch.served",
                    "proxy_dispatch.tracked.symbolic", "sym_register.served"))}
            fh.write(json.dumps({"stats": served}) + "\n")


# ---------------------------------------------------------------------------
# Comparison of two worlds (each in its own process).
# ---------------------------------------------------------------------------

def _run_process(plan: list[dict], world: str, env: dict | None = None) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        plan_path = os.path.join(d, "plan.json")
        out_path = os.path.join(d, "out.jsonl")
        with open(plan_path, "w") as fh:
            json.dump(plan, fh)
        penv = {**os.environ, **(env or {})}
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "run", plan_path, "--world", world,
                            "--out", out_path], env=penv, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{world} world failed (rc {r.returncode}):\n{r.stderr[-4000:]}")
        with open(out_path) as fh:
            return [json.loads(line) for line in fh]


def _first_diff(a: Any, b: Any, path: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k}: only in {'stock' if k in a else 'fastfake'}: {a.get(k, b.get(k))!r}"[:2000]
            d = _first_diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            if all(isinstance(x, str) for x in a + b):
                extra_a = [x for x in a if a.count(x) > b.count(x)]
                extra_b = [x for x in b if b.count(x) > a.count(x)]
                return (f"{path}: {len(a)} items (stock) != {len(b)} (fastfake); only stock: "
                        f"{extra_a[:5]}; only fastfake: {extra_b[:5]}")
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {str(a)[:600]!r} != {str(b)[:600]!r}"


#: fastfake's counters of what it served in the last compared plan
LAST_STATS: dict = {}


def compare(plan: list[dict], env: dict | None = None) -> tuple[int, str, dict] | None:
    """(index of the first differing trace, the difference, fastfake's stats) or None."""
    stock = _run_process(plan, "stock")
    fast = _run_process(plan, "fastfake", env)
    stats = fast[-1].get("stats", {}) if fast and "stats" in fast[-1] else {}
    LAST_STATS.clear()
    LAST_STATS.update(stats)
    fast = [x for x in fast if "stats" not in x]
    for i, (a, b) in enumerate(zip(stock, fast)):
        d = _first_diff(a, b)
        if d:
            return i, d, stats
    if len(stock) != len(fast):
        return min(len(stock), len(fast)), "different number of traces", stats
    return None


def shrink(plan: list[dict], env: dict | None = None, log=print) -> list[dict]:
    """Remove traces, then program lines, while a difference remains."""
    found = compare(plan, env)
    if found is None:
        return plan
    plan = plan[: found[0] + 1]
    i = 0
    while i < len(plan) - 1:  # the last trace is where it differs: keep it
        cand = plan[:i] + plan[i + 1:]
        if compare(cand, env) is not None:
            plan = cand
            log(f"[shrink] {len(plan)} traces")
        else:
            i += 1
    # program lines: drop one `vN = ...` line at a time from every program of the plan
    srcs = sorted({p["src"] for p in plan})
    for src in srcs:
        lines = src.split("\n")
        j = 1
        while j < len(lines) - 1:
            cand_lines = lines[:j] + lines[j + 1:]
            new = "\n".join(cand_lines)
            cand = [dict(p, src=new) if p["src"] == "\n".join(lines) else p for p in plan]
            try:
                ok = compare(cand, env) is not None
            except RuntimeError:
                ok = False
            if ok:
                plan, lines = cand, cand_lines
                log(f"[shrink] program down to {len(lines) - 2} steps")
            else:
                j += 1
    return plan


def repro(plan: list[dict]) -> str:
    """A standalone script printing the last trace's guards, for stock or fastfake."""
    return (
        "import json, sys\nsys.path[:0] = ['.', 'tests']\nimport wholetrace\nwholetrace._pin_stock_order()\n"
        "if sys.argv[1:] == ['fastfake']:\n    import fastfake; fastfake.install()\n"
        f"plan = json.loads({json.dumps(json.dumps(plan))})\n"
        "for item in plan:\n    out = wholetrace.run_trace(item)\n"
        "print(json.dumps(out.get('shape_env', {}).get('guards'), indent=1))\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a plan in this process (one world)")
    r.add_argument("plan")
    r.add_argument("--world", required=True, choices=("stock", "fastfake"))
    r.add_argument("--out", required=True)
    c = sub.add_parser("check", help="run a seeded plan in both worlds and compare")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--traces", type=int, default=60)
    c.add_argument("--tracers", default=",".join(TRACERS))
    c.add_argument("--shrink", action="store_true")
    a = p.parse_args(argv)
    if a.cmd == "run":
        with open(a.plan) as fh:
            run_world(json.load(fh), a.world, a.out)
        return 0
    plan = make_plan(a.seed, a.traces, tuple(a.tracers.split(",")))
    found = compare(plan)
    if found is None:
        print(f"seed {a.seed}: {len(plan)} traces identical (fastfake served: {json.dumps(LAST_STATS, sort_keys=True)})")
        return 0
    i, d, stats = found
    print(f"seed {a.seed}: trace {i} differs ({plan[i]['tracer']}, B={plan[i]['B']}, S={plan[i]['S']}):\n  {d}")
    print(plan[i]["src"])
    if a.shrink:
        small = shrink(plan)
        print(f"shrunk to {len(small)} traces; repro:\n")
        print(repro(small))
    return 1


if __name__ == "__main__":
    sys.exit(main())
