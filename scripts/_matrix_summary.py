"""One row of scripts/matrix's summary from a pytest junit file:
``passed|failed|skipped|parity failures|graph identity|self-test``.

Parity failures are failed tests of the differential suites (stock vs fastfake
results); graph identity is the verdict of tests/test_bench_graphs.py; self-test is
what fastfake's install-time self-test decided on this release (run in this
environment's own interpreter)."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

PARITY_FILES = ("opinfo", "properties", "parity", "symbolic", "errors", "crosscheck", "selftest", "stateful",
                "hostile", "stock_cache", "real_inputs")


def main(junit: str, src: str) -> str:
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return "no junit|||||"
    passed = failed = skipped = parity = 0
    graphs_run = graphs_failed = 0
    for case in root.iter("testcase"):
        cls = case.get("classname", "")
        bad = case.find("failure") is not None or case.find("error") is not None
        skip = case.find("skipped") is not None
        if bad:
            failed += 1
            if any(p in cls for p in PARITY_FILES):
                parity += 1
        elif skip:
            skipped += 1
        else:
            passed += 1
        if "test_bench_graphs" in cls and not skip:
            graphs_run += 1
            graphs_failed += bad
    if graphs_run == 0:
        graphs = "not run"
    elif graphs_failed:
        graphs = f"{graphs_failed} of {graphs_run} differ"
    else:
        graphs = f"identical ({graphs_run})"
    probe = (
        "import fastfake, json; fastfake.install(); r = fastfake.selftest_report(); "
        "print('passed' if all(r['passed'].values()) else 'off: ' + ', '.join("
        "k for k, ok in r['passed'].items() if not ok))"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe], cwd=src, capture_output=True, text=True, timeout=300,
            env={**os.environ, "FASTFAKE_NO_SELFTEST_CACHE": "1"},  # the programs run here
        )
        selftest = out.stdout.strip().splitlines()[-1] if out.returncode == 0 else "refused"
    except Exception as e:  # pragma: no cover - reporting only
        selftest = f"error: {type(e).__name__}"
    return f"{passed}|{failed}|{skipped}|{parity}|{graphs}|{selftest}"


if __name__ == "__main__":
    print(main(sys.argv[1], sys.argv[2]))
