"""Compare two pytest junit files test by test (scripts/pytorch_suites).

Prints the counts of both runs and every test whose outcome differs; exits 1 if a
test that passes on stock fails with fastfake and is not listed, with its reason,
in the known-differences file (lines: ``<test id>  # reason``)."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def outcomes(path: str) -> dict[str, tuple[str, str]]:
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        tid = f"{case.get('classname', '')}::{case.get('name', '')}"
        status, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                status = "skipped" if tag == "skipped" else "failed"
                msg = (el.get("message") or "").splitlines()[0][:200] if el.get("message") else ""
                break
        out[tid] = (status, msg)
    return out


def known(path: str) -> dict[str, str]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            tid, _, reason = line.partition("#")
            out[tid.strip()] = reason.strip()
    return out


def main(stock_xml: str, fast_xml: str, known_path: str) -> int:
    stock, fast = outcomes(stock_xml), outcomes(fast_xml)
    expected = known(known_path)

    def counts(d):
        c = {"passed": 0, "failed": 0, "skipped": 0}
        for s, _ in d.values():
            c[s] += 1
        return c

    print("| run | tests | passed | failed | skipped |")
    print("| --- | --- | --- | --- | --- |")
    for name, d in (("stock", stock), ("fastfake", fast)):
        c = counts(d)
        print(f"| {name} | {len(d)} | {c['passed']} | {c['failed']} | {c['skipped']} |")
    bad = 0
    diffs = sorted(t for t in stock.keys() | fast.keys() if stock.get(t, ("missing", ""))[0] != fast.get(t, ("missing", ""))[0])
    print(f"\n{len(diffs)} tests differ")
    for t in diffs:
        s, f = stock.get(t, ("missing", "")), fast.get(t, ("missing", ""))
        reason = expected.get(t)
        regression = s[0] == "passed" and f[0] != "passed"
        tag = "known: " + reason if reason else ("REGRESSION" if regression else "differs")
        bad += regression and reason is None
        print(f"- {t}: stock {s[0]}, fastfake {f[0]} {('(' + f[1] + ')') if f[1] else ''} [{tag}]")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
