"""Python frame-stack chunks kept for reuse (fastfake/runtime/frame_stack.py)."""
from __future__ import annotations

import sys
import threading

import pytest
import torch

import fastfake
from fastfake import _C
from fastfake.runtime import frame_stack as _frame_stack
from faults import fault_turns_off_only, in_subprocess, switched_off

pytestmark = pytest.mark.skipif(
    not _frame_stack.available(), reason="this interpreter does not unmap frame-stack chunks at every crossing"
)


def _descend(n: int) -> int:
    return _descend(n - 1) if n else 0


def _chunk_requests(rounds: int, depth: int = 400) -> int:
    """Arena requests of the chunk size while a recursion goes ``depth`` frames
    down and back ``rounds`` times."""
    size = _frame_stack.chunk_size()
    _descend(depth)  # (the first descent may find fewer chunks kept than it crosses)
    _C.frame_stack_probe(True)
    try:
        for _ in range(rounds):
            _descend(depth)
        return _C.frame_stack_sizes().get(size, 0)
    finally:
        _C.frame_stack_probe(False)


@pytest.fixture
def installed():
    fastfake.install()
    yield
    fastfake.uninstall()


@pytest.fixture
def deep():
    """Room for recursions many chunks deep."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    yield
    sys.setrecursionlimit(limit)


def test_probe_finds_the_chunk_size():
    # CPython 3.11 / 3.12: DATA_STACK_CHUNK_SIZE
    assert _frame_stack.chunk_size() == 16 * 1024


def test_installed_keeps_chunks_and_the_interpreter_maps_none(installed):
    current, chunk, keep, _ = _C.frame_stack_state()
    assert (current, chunk, keep) == (True, _frame_stack.chunk_size(), _frame_stack.KEEP)
    before = fastfake.stats()["frame_stack.reused"]
    assert _chunk_requests(100) == 0  # every request answered with a kept chunk
    assert fastfake.stats()["frame_stack.reused"] - before >= 100


def test_off_the_interpreter_maps_a_chunk_per_crossing():
    """What it removes (and what makes the test above able to fail)."""
    fastfake.install()
    fastfake.uninstall()
    assert _C.frame_stack_state()[0] is False
    _C.frame_stack_hook(True)  # in front, passing through, to count
    try:
        assert _chunk_requests(100) >= 100
    finally:
        _C.frame_stack_hook(False)


def test_uninstall_puts_the_interpreter_allocator_back_and_hands_chunks_back(installed, deep):
    _descend(2000)
    assert _C.frame_stack_state()[3] == _frame_stack.KEEP
    flushed = fastfake.stats()["frame_stack.flushed"]
    fastfake.uninstall()
    assert _C.frame_stack_state() == (False, 0, 0, 0)
    assert fastfake.stats()["frame_stack.flushed"] - flushed == _frame_stack.KEEP
    _descend(2000)  # the interpreter's own allocator frees what was handed out through the hook
    fastfake.install()
    assert _C.frame_stack_state()[0] is True


def test_bounded(installed, deep):
    released = fastfake.stats()["frame_stack.released"]
    for _ in range(3):
        _descend(3000)  # ~20 chunks deep
    state = _C.frame_stack_state()
    assert state[3] <= _frame_stack.KEEP
    assert fastfake.stats()["frame_stack.released"] > released


def test_threads_and_traces(installed):
    """Several threads going down and up at once, each tracing fake ops at the
    bottom: the results are those of a stock run."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def work(depth: int, out: list) -> None:
        def down(n):
            if n:
                return down(n - 1)
            with FakeTensorMode():
                x = torch.empty(4, depth % 7 + 1)
                y = (x.t() @ x).relu().sum(0)
            return (tuple(y.shape), y.stride(), y.dtype)

        for i in range(30):
            out.append(down(depth + i * 13))

    results: dict[int, list] = {d: [] for d in (150, 290, 430, 570)}
    threads = [threading.Thread(target=work, args=(d, results[d])) for d in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for d, got in results.items():
        assert got == [((d % 7 + 1,), (1,), torch.float32)] * 30
    assert fastfake.stats()["frame_stack.reused"] > 0


def test_switched_off():
    assert switched_off("frame_stack", "_C.frame_stack_state()") == "(False, 0, 0, 0)"


def test_fault_not_reused_turns_off_only_frame_stack():
    fault_turns_off_only(
        "import fastfake.runtime.frame_stack as fs; fs.KEEP = 0", "frame_stack", keep="cache",
        still_on="fastfake._C.frame_stack_state()[2] > 0",
    )


def test_not_offered_where_the_interpreter_keeps_its_chunks():
    """An interpreter that maps nothing at the crossings (CPython with gh-142183's
    fix): the probe finds no chunk size and fastfake steps aside."""
    r = in_subprocess(
        """
        import fastfake
        from fastfake import _C
        from fastfake.runtime import frame_stack as fs
        probe = fs._probe

        def keeping_probe():
            # the interpreter keeps its chunks (as CPython with the fix): emulated by
            # keeping them in front of the probe, which then sees no request
            _C.frame_stack_keep(16 * 1024, 4)
            return probe()

        fs._probe = keeping_probe
        fastfake.install()
        print("size:", fs.chunk_size())
        print("state:", _C.frame_stack_state())
        print("why:", fastfake.core.install.explain()["frame_stack"])
        """
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "size: 0" in r.stdout and "state: (False, 0, 0, 0)" in r.stdout, r.stdout
    assert "why: not offered on this release" in r.stdout, r.stdout


def test_probe_looks_past_a_request_that_is_not_a_chunk(monkeypatch):
    """A request seen at a depth where no boundary is (a pymalloc arena, another
    thread's) does not end the search: the probe still finds the chunk size (it
    once concluded "the interpreter keeps its chunks" there, and a process's
    self-test key changed with it)."""
    fastfake.install()
    fastfake.uninstall()
    real = _frame_stack._requests
    calls = []

    def spurious() -> int:
        calls.append(1)
        return real() + (1 if len(calls) == 2 else 0)  # depth 1 looks like a crossing

    monkeypatch.setattr(_frame_stack, "_requests", spurious)
    _C.frame_stack_hook(True)
    try:
        assert _frame_stack._probe() == 16 * 1024
    finally:
        _C.frame_stack_hook(False)
    assert len(calls) > 2
