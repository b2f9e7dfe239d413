"""Python frame-stack chunks kept for reuse.

CPython 3.11 keeps a thread's frames in a stack of 16 KiB chunks and hands a
chunk back to its arena allocator -- ``munmap`` -- as soon as the stack drops
below it, mapping a fresh one (``mmap``, page faults, a TLB shootdown) when it
grows again. 3.12 does the same; 3.13 and 3.14 keep one chunk since the fix of
CPython gh-142183. A call stack that goes up and down across a chunk boundary
pays that at every crossing, and tracing stacks are deep and go up and down once
per op. Measured on torch 2.13.0 / Python 3.11.7 (``perf stat -e
syscalls:sys_enter_mmap``, one fresh process each): stock's first ``dynamic=True``
compile of the zoo Llama maps 134,000 chunks; ``export_data_dependent --size
small`` (three exports) 299,000 under stock and 433,000 under fastfake, whose
extra Python frames (its wrappers of stock's cache code) moved a hot boundary --
the whole of the 6-12 % by which that workload had been slower than stock.

``install()`` puts a small allocator in front of the interpreter's arena
allocator (``PyObject_SetArenaAllocator``, ``csrc/runtime/frame_stack.cpp``): up
to :data:`KEEP` freed blocks of the chunk size are kept and handed to the next
requests of that size; everything else passes through. Memory only: every block
it hands out came from the interpreter's allocator with that size, nothing reads
what a kept block held, and no value of a trace passes through it. Bounded to
``KEEP`` chunks (64 KiB) per process.

Offered only where the interpreter is seen to thrash: :func:`chunk_size` watches
the arena requests while a recursion goes down across a chunk boundary and back
16 times, and finds one request of one size per crossing. An interpreter that
keeps its chunks (3.13 / 3.14 with the fix, a resizable stack later) requests
nothing there, and fastfake steps aside. The self-test (feature
``frame_stack``) runs a fake program across boundaries with it on and checks the
kept chunks were reused. ``FASTFAKE_DISABLE=frame_stack`` turns it off;
``uninstall()`` puts the interpreter's allocator back.

Counters (``stats()``): ``frame_stack.reused`` (requests answered with a kept
chunk), ``frame_stack.kept``, ``frame_stack.released`` (freed past the bound),
``frame_stack.flushed`` (kept chunks handed back when it was turned off). They
count what the process's stack did, not what a program is: the same trace counts
differently when the cyclic collector runs at another point of it (a collection's
callbacks and finalizers push frames too).
"""
from __future__ import annotations

import functools

from fastfake import _C

#: Chunks kept at most (16 KiB each on CPython 3.11 / 3.12).
KEEP = 4
#: Crossings the probe watches.
ROUNDS = 16
#: Deepest recursion the probe tries, below the caller's stack (about four
#: chunks of its frames).
MAX_DEPTH = 600
#: Largest block size it keeps (the bound is KEEP blocks of it).
MAX_CHUNK = 64 * 1024


def _descend(n: int) -> int:
    return _descend(n - 1) if n else 0


def _requests() -> int:
    return sum(_C.frame_stack_sizes().values())


def _probe() -> int:
    """The chunk size the interpreter requests at every crossing, or 0. The hook
    must be in place, passing through. A request seen at some depth may be
    something else (a pymalloc arena, another thread's); only a size requested at
    every one of ROUNDS crossings counts, and the search goes on past others."""
    _C.frame_stack_probe(True)
    try:
        depth = 1
        while depth < MAX_DEPTH:
            before = _requests()
            _descend(depth)
            if _requests() == before:
                depth += 1
                continue
            # a request at this depth: watch the crossing ROUNDS times
            _C.frame_stack_probe(True)
            for _ in range(ROUNDS):
                _descend(depth)
            sizes = _C.frame_stack_sizes()
            _C.frame_stack_probe(True)
            repeated = [size for size, n in sizes.items() if n >= ROUNDS and size <= MAX_CHUNK]
            if len(repeated) == 1:
                return repeated[0]
            depth += 1
        return 0
    except RecursionError:
        return 0
    finally:
        _C.frame_stack_probe(False)


@functools.cache
def chunk_size() -> int:
    """The frame-stack chunk size this interpreter maps and unmaps at every
    crossing of a chunk boundary (0: it does not; fastfake steps aside). Probed
    once per process, with fastfake's allocator in place and passing through."""
    _C.frame_stack_hook(True)
    _C.frame_stack_keep(0, 0)
    size = _probe()
    if not size:
        _C.frame_stack_hook(False)
    return size


def available() -> bool:
    return chunk_size() > 0


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py): keep chunks, or pass
    everything through and put the interpreter's allocator back."""
    del crosscheck  # no value passes through it
    size = chunk_size()
    if not size:
        return
    if on:
        _C.frame_stack_hook(True)
        _C.frame_stack_keep(size, KEEP)
    else:
        _C.frame_stack_hook(False)  # (hands the kept chunks back too)
