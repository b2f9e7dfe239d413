"""Memory of the result cache over a long mixed run (``python -m bench.memory``).

Calls ``mm``, ``sum``, ``t`` and ``softmax`` on fake tensors of many distinct
shapes (static, and with ``--symbolic`` in one ShapeEnv), far more distinct keys
than the cache holds, under fastfake; then ``FakeTensorMode.cache_clear()`` (which
empties stock's unbounded dispatch cache and fastfake's) and the same run again.
Prints the process's resident memory, fastfake's entries and the bytes its byte
bound counts (``fastfake._C.cache_bytes()``) and stock's entries at each point.
"""
from __future__ import annotations

import argparse
import gc
import os
import time

import torch


def rss_mib() -> float:
    """Resident memory (Linux: /proc/self/statm)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=25_000, help="distinct shapes (4 ops each)")
    p.add_argument("--calls", type=int, default=240_000)
    p.add_argument("--symbolic", action="store_true")
    args = p.parse_args(argv)

    import fastfake
    from fastfake import _C
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    fastfake.install()
    mode = FakeTensorMode(shape_env=ShapeEnv() if args.symbolic else None)
    def shape(i: int) -> tuple[int, int]:
        return (1 + i % 97, 2 + i // 97)

    def run() -> None:
        made: dict[int, torch.Tensor] = {}
        with mode:
            fw = torch.empty(64, 32)
            for c in range(args.calls):
                i = (c * 7919) % args.keys
                x = made.get(i)
                if x is None:
                    if args.symbolic:
                        x = mode.from_tensor(torch.empty(*shape(i), 64))
                    else:
                        x = torch.empty(*shape(i), 64)
                    if len(made) < 4096:
                        made[i] = x
                op = c % 4
                if op == 0:
                    torch.matmul(x, fw)
                elif op == 1:
                    x.sum(1)
                elif op == 2:
                    x.transpose(0, 1)
                else:
                    torch.softmax(x, -1)

    def line(what: str) -> None:
        gc.collect()
        print(f"{what:34s} rss {rss_mib():8.1f} MiB | fastfake entries {_C.cache_size():6d} "
              f"bytes {_C.cache_bytes() / 2**20:7.1f} MiB | stock entries {len(FakeTensorMode.cache):7d}",
              flush=True)

    line("start")
    t0 = time.perf_counter()
    run()
    line(f"after {args.calls} calls ({time.perf_counter() - t0:.0f} s)")
    FakeTensorMode.cache_clear()
    line("after FakeTensorMode.cache_clear()")
    run()
    line("after the same calls again")
    FakeTensorMode.cache_clear()
    line("after FakeTensorMode.cache_clear()")
    from fastfake.core import install as _install

    print(f"evictions {fastfake.stats()['cache.evict']}; bounds {_install.CACHE_MAX_BYTES >> 20} MiB / "
          f"{_install.CACHE_MAX_ENTRIES} entries")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
