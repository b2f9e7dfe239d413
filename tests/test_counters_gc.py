"""fastfake's counters describe the program, not when the cyclic collector ran.

Tests compare two runs' ``stats()`` (a trace and its repeat, a process and the
next); a counter that follows the collector's timing makes such a comparison fail
now and then, far from its cause. CPython untracks tuples and dicts of untracked
items itself when a collection passes them, and a collection's callbacks and
finalizers push frames: the same program run under other collection thresholds
shows which counters move with them. Only the frame-stack chunks' may (they count
what the process's stack did; tests comparing counters leave them out).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import parity

_CHILD = r"""
import gc, json, random, sys
threshold = int(sys.argv[1])
if threshold < 0:
    gc.disable()
elif threshold:
    gc.set_threshold(threshold, 3, 3)
import torch, fastfake
import aot_programs
fastfake.install()
fastfake.reset_stats()
aot_programs.compiled_encoder(True)
rng = random.Random(3)
for _ in range(8):
    fn, inputs = aot_programs.program(rng)
    for dynamic in (True, False):
        try:
            aot_programs.trace(fn, inputs, dynamic)
        except Exception:
            pass
print(json.dumps({k: v for k, v in fastfake.stats().items() if v}))
"""

# (the chunks of the frame stack follow the process's stack: fastfake/runtime/frame_stack.py)
_RUNTIME = ("frame_stack.",)


def _counters(threshold: int, tmp_path) -> dict:
    here = os.path.dirname(__file__)
    store = tmp_path / f"store{threshold}"  # (each its own: nothing left by the one before)
    env = dict(os.environ, FASTFAKE_CACHE_DIR=str(store), PYTHONPATH=os.pathsep.join([here, os.path.dirname(here), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(threshold)], env=env, capture_output=True,
                         text=True, timeout=900, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@parity.requires_symbolic_cache
@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's collector")
def test_counters_do_not_follow_the_collectors_timing(tmp_path):
    runs = {t: _counters(t, tmp_path) for t in (0, 7, -1)}  # default thresholds, very frequent, none
    program = {t: {k: v for k, v in c.items() if not k.startswith(_RUNTIME)} for t, c in runs.items()}
    assert program[0].get("untrack.tuples", 0) > 0 and program[0]["dispatch.total"] > 1000
    assert program[7] == program[0], {k: (program[0].get(k), program[7].get(k))
                                       for k in set(program[0]) | set(program[7])
                                       if program[0].get(k) != program[7].get(k)}
    assert program[-1] == program[0], {k: (program[0].get(k), program[-1].get(k))
                                        for k in set(program[0]) | set(program[-1])
                                        if program[0].get(k) != program[-1].get(k)}
