"""``python -m fastfake``: use fastfake without editing a program.

    python -m fastfake run train.py --epochs 1      # the program, with fastfake installed
    python -m fastfake run -m mypkg.export_model     # a module, as `python -m` runs it
    python -m fastfake run --report-json stats.json train.py
    python -m fastfake report stats.json             # that run's report again
    python -m fastfake doctor                        # this torch, the self-test, the costs
    python -m fastfake accelerations                 # the table of accelerations

``run`` installs fastfake, runs the program as ``python`` would (``sys.argv``, its
``__main__``, ``sys.path[0]`` the script's folder), and prints a one-screen report to
standard error when it ends: calls served and left to stock, why calls went to stock,
the operators stock computed most. The program's standard output and exit code are
its own.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time

_REASON_PARTS = (".bypass.", ".fallback.", ".reject.", ".declined.", ".stock.")


def _fmt(n: int) -> str:
    return f"{n:,}"


def collect() -> dict:
    """What a report is made of (JSON-serialisable)."""
    import torch

    import fastfake

    try:
        selftest = fastfake.selftest_report()
    except Exception:  # noqa: BLE001 - a report must not fail on this
        selftest = None
    return {
        "torch": torch.__version__,
        "fastfake": fastfake.__version__,
        "stats": fastfake.stats(),
        "stock_calls": fastfake.stock_report(),
        "selftest": selftest,
    }


def format_report(data: dict, top: int = 10) -> str:
    """The one-screen report of :func:`collect`'s data."""
    s: dict = data.get("stats", {})
    total = s.get("dispatch.total", 0)
    stock = s.get("dispatch.stock", 0)
    served = max(total - stock, 0)
    lines = [f"fastfake {data.get('fastfake', '?')} report (torch {data.get('torch', '?')})"]
    if total:
        lines.append(f"  fake dispatch: {_fmt(total)} calls, {_fmt(served)} served "
                     f"({100.0 * served / total:.1f}%), {_fmt(stock)} computed by stock")
    else:
        lines.append("  fake dispatch: no FakeTensorMode call was made")
    from fastfake.core import accelerations as _accelerations

    parts = [(acc.title.replace("`", ""), sum(s.get(c, 0) for c in acc.served))
             for acc in _accelerations.ACCELERATIONS]
    shown = [(k, v) for k, v in parts if v]
    if shown:
        lines.append("  served by:")
        lines += [f"    {k:<36} {_fmt(v):>12}" for k, v in shown]
    reasons = sorted(((k, v) for k, v in s.items() if v and any(p in k for p in _REASON_PARTS)),
                     key=lambda kv: (-kv[1], kv[0]))
    if reasons:
        lines.append(f"  went to stock, by reason (top {min(top, len(reasons))} of {len(reasons)}):")
        lines += [f"    {k:<52} {_fmt(v):>10}" for k, v in reasons[:top]]
    calls = data.get("stock_calls", {})
    ops = sorted(calls.items(), key=lambda kv: (-kv[1].get("outermost", 0), kv[0]))
    ops = [(k, v) for k, v in ops if v.get("outermost", 0)]
    if ops:
        lines.append(f"  operators stock computed (outermost calls, top {min(top, len(ops))}):")
        lines += [f"    {k:<52} {_fmt(v['outermost']):>10}" for k, v in ops[:top]]
    st = data.get("selftest")
    if st:
        passed = st.get("passed", {})
        ok = sum(1 for v in passed.values() if v)
        off = [k for k, v in passed.items() if not v]
        lines.append(f"  self-test: {ok}/{len(passed)} accelerations proven "
                     f"({st.get('seconds', 0):.2f} s, {st.get('source', '?')})"
                     + (f"; off: {', '.join(off)}" if off else ""))
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    import fastfake

    fastfake.install()
    fastfake.reset_stats()
    if args.module:
        target, rest = args.module, args.args
    else:
        if not args.args:
            print("fastfake run: a script or -m module is needed", file=sys.stderr)
            return 2
        target, rest = args.args[0], args.args[1:]
    sys.argv = [target, *rest]
    try:
        if args.module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    finally:
        # (also on SystemExit and exceptions, which then go on as the program's own)
        _report(args)
    return 0


def _report(args: argparse.Namespace) -> None:
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    data = collect()
    if args.report_json:
        with open(args.report_json, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
    if not args.quiet:
        print(format_report(data), file=sys.stderr)


def _doctor(args: argparse.Namespace) -> int:
    import torch

    import fastfake
    from fastfake.common import compat as _compat

    t1 = time.perf_counter()
    fastfake.install()
    t2 = time.perf_counter()
    release = _compat.torch_release()
    supported = release in fastfake.SUPPORTED_TORCH_VERSIONS
    print(f"fastfake {fastfake.__version__}, built for torch {fastfake._C.built_for()}")
    print(f"torch {torch.__version__} ({'CUDA ' + torch.version.cuda if torch.version.cuda else 'CPU build'}), "
          f"Python {sys.version.split()[0]}")
    print(f"release {release}: " + ("supported" if supported else
          f"not one fastfake was built for ({', '.join(fastfake.SUPPORTED_TORCH_VERSIONS)}); "
          "the self-test decides what runs"))
    print(f"install() {1000 * (t2 - t1):.0f} ms (the self-test and the proofs of stock's code)")
    rep = fastfake.selftest_report()
    print(f"self-test: {rep.get('source')} ({rep.get('seconds', 0):.2f} s when run), store: {rep.get('store')}")
    passed, served = rep.get("passed", {}), rep.get("served", {})
    from fastfake.core import accelerations as _accelerations
    from fastfake.core import install as _install

    state = _install.explain()
    width = max(len(a.name) for a in _accelerations.ACCELERATIONS)
    for acc in _accelerations.ACCELERATIONS:
        proof = (f"self-test served {served.get(acc.name, 0)}" if acc.name in passed
                 else "no self-test feature" if not acc.selftest else "not in the self-test here")
        print(f"  {acc.name:<{width}}  {state[acc.name]:<4}  {proof}")
    switches = sorted(k for k in os.environ if k.startswith("FASTFAKE"))
    print("switches set: " + (", ".join(f"{k}={os.environ[k]}" for k in switches) if switches else "none"))
    return 0 if supported or any(passed.values()) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fastfake", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a script or module with fastfake installed")
    r.add_argument("-m", dest="module", help="run a module, as `python -m` does")
    r.add_argument("--report-json", help="also write the report's data to this file")
    r.add_argument("--quiet", action="store_true", help="print no report")
    r.add_argument("args", nargs=argparse.REMAINDER, help="script and its arguments")
    rep = sub.add_parser("report", help="print the report of a --report-json file")
    rep.add_argument("path")
    rep.add_argument("--top", type=int, default=10)
    sub.add_parser("doctor", help="this torch build, the self-test per acceleration, install cost")
    sub.add_parser("accelerations", help="the table of accelerations (markdown)")
    a = p.parse_args(argv)
    if a.cmd == "run":
        return _run(a)
    if a.cmd == "report":
        try:
            with open(a.path) as fh:
                data = json.load(fh)
        except (OSError, ValueError) as e:
            print(f"fastfake report: cannot read {a.path}: {e}", file=sys.stderr)
            return 2
        print(format_report(data, a.top))
        return 0
    if a.cmd == "accelerations":
        from fastfake.core import accelerations as _accelerations

        print(_accelerations.markdown())
        return 0
    return _doctor(a)
