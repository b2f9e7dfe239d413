"""fast_detach in C++ (csrc/convert/detach.cpp, fastfake/convert/detach.py): the snapshot of
every value make_fx traces and FakeTensorProp propagates equals stock's in every
field -- storage (the same), sizes / strides / offset (the same SymNodes), version
counter (shared with the input), key set, ``__dict__``, leaf / view / inference
state -- and everything it does not cover goes to stock, errors included."""
from __future__ import annotations

import contextlib
import random

import pytest
import torch
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager
from torch.fx.experimental import proxy_tensor
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import fastfake
from fastfake import _C
from fastfake.convert import detach as _detach
from fastfake.core.selftest import _dispatch_tls

STOCK = _detach.stock_fast_detach()


@pytest.fixture(autouse=True)
def _installed():
    fastfake.install()
    assert proxy_tensor.fast_detach is _C.fast_detach
    fastfake.reset_stats()
    yield
    fastfake.uninstall()


def describe(t: torch.Tensor) -> tuple:
    def node_or_int(v):
        return id(v.node) if isinstance(v, torch.SymInt) else v

    return (
        type(t),
        tuple(node_or_int(v) for v in (*t.shape, *t.stride(), t.storage_offset())),
        t.untyped_storage()._cdata,
        t.dtype,
        t.fake_device,
        t.device,
        t.layout,
        t.requires_grad,
        t.is_leaf,
        t._is_view(),
        t._base is None,
        t.grad_fn is None,
        str(torch._C._dispatch_keys(t)),
        t.is_conj(),
        t.is_neg(),
        t.is_inference(),
        sorted((k, id(v) if isinstance(v, FakeTensorMode) else repr(v)) for k, v in vars(t).items()),
    )


def assert_same(mode, x, *extra, state=contextlib.nullcontext):
    """fastfake's snapshot (served) equals stock's, both taken under ``state()``;
    the version counter is then checked outside it."""
    fastfake.reset_stats()
    with state():
        tls = _dispatch_tls()
        got = _C.fast_detach(mode, x, *extra)
        assert _dispatch_tls() == tls  # the thread-local dispatch state is put back
        want = STOCK(mode, x, *extra)
    assert fastfake.stats()["detach.fast"] == 1, fastfake.stats()
    assert describe(got) == describe(want)
    assert got is not x and got is not want
    if not x.is_inference():
        assert got._version == want._version == x._version
        with x.fake_mode, torch.no_grad():
            x.detach().add_(0) if x.dtype.is_floating_point else x.detach().fill_(0)
        assert got._version == want._version == x._version  # still shared
    return got


def _sources(mode, dev="cpu"):
    x = torch.empty(4, 6, device=dev, requires_grad=dev == "cpu")
    out = [x, x.t(), torch.empty(2, 3, dtype=torch.bfloat16, device=dev), torch.empty(0, 3, device=dev)]
    if dev == "cpu":
        out += [
            x[1:, ::2],
            x.unsqueeze(0).expand(3, 4, 6),
            x * 2,  # non-leaf with a grad_fn
            torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last),
            torch.empty(3, dtype=torch.complex64).conj(),
            torch.empty(3, dtype=torch.complex64).conj().imag,
            torch.empty(5, dtype=torch.int64),
            torch.empty(()),
        ]
    return out


def test_static_tensors_match_stock():
    mode = FakeTensorMode()
    with mode:
        srcs = _sources(mode) + _sources(mode, "cuda")
    for x in srcs:
        assert_same(mode, x)
        assert_same(mode, x, False)
        assert_same(mode, x, True)  # include_real without a real tensor


def test_inference_tensors_match_stock():
    mode = FakeTensorMode()
    with torch.inference_mode(), mode:
        x = torch.empty(3, 4)
        y = x.t()
    assert_same(mode, x)
    assert_same(mode, y)
    with torch.inference_mode():
        assert_same(mode, x)
    # a normal tensor snapshotted inside inference mode
    with mode:
        z = torch.empty(2, 2)
    with torch.inference_mode():
        assert_same(mode, z)


def test_symbolic_tensors_keep_their_symnodes():
    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env)
    x = mode.from_tensor(torch.empty(4, 6))
    with mode:
        views = [x, x[1:], x.t(), x.view(-1), x + 1]
    for v in views:
        got = assert_same(mode, v)
        for a, b in zip((*got.shape, *got.stride()), (*v.shape, *v.stride())):
            if isinstance(a, torch.SymInt):
                assert a.node is b.node
    assert env.guards == [] or all(g for g in env.guards)


def test_snapshot_of_other_modes_tensor_uses_given_mode():
    m1, m2 = FakeTensorMode(), FakeTensorMode()
    with m1:
        x = torch.empty(3)
    got = assert_same(m2, x)
    assert got.fake_mode is m2


def test_random_sequence_matches_stock():
    """Long random mix of sources, views of snapshots and modes, one process."""
    rng = random.Random(0)
    modes = [FakeTensorMode(), FakeTensorMode(shape_env=ShapeEnv())]
    pool = []
    for m in modes:
        with m:
            pool += [(m, t) for t in _sources(m)]
    pool.append((modes[1], modes[1].from_tensor(torch.empty(5, 7))))
    for _ in range(400):
        m, t = rng.choice(pool)
        got = assert_same(m, t, state=functionalizing if rng.random() < 0.3 else contextlib.nullcontext)
        if rng.random() < 0.3 and t.dim() > 0 and t.shape[0] != 0:
            with m:
                pool.append((m, got[: t.shape[0] - 1] if rng.random() < 0.5 else got.transpose(0, -1)))


@contextlib.contextmanager
def functionalizing():
    """The thread-local state AOTAutograd snapshots under: the Python dispatcher on
    and functionalization's key in the include set."""
    from torch._dispatch.python import enable_python_dispatcher

    with enable_python_dispatcher():
        torch._enable_functionalization(reapply_views=True)
        try:
            yield
        finally:
            torch._disable_functionalization()


def test_functionalizing_state_matches_stock():
    env = ShapeEnv()
    modes = [FakeTensorMode(), FakeTensorMode(shape_env=env)]
    with modes[0]:
        srcs = [(modes[0], t) for t in _sources(modes[0]) + _sources(modes[0], "cuda")]
    s = modes[1].from_tensor(torch.empty(4, 6))
    with modes[1]:
        srcs += [(modes[1], t) for t in (s, s[1:], s.t(), s * 2)]
    with functionalizing():
        tls = _dispatch_tls()
    assert "Functionalize" in tls[0] and "PythonDispatcher" in tls[0], tls
    for m, x in srcs:
        assert_same(m, x, state=functionalizing)


def test_aot_autograd_graphs_identical():
    """AOTAutograd (make_fx under functionalization, forward and backward): its
    snapshots are served, and graphs and node metadata are stock's."""
    from functorch.compile import aot_function, make_boxed_func

    def f(a, w, b):
        h = torch.relu(a @ w + b)
        return (h.t().contiguous().view(-1) * 2).sum() + h[1:].mean()

    def run(dynamic):
        graphs = []

        def keep(gm, _inputs):
            meta = [(n.name, n.op, str(n.target), str(n.meta.get("val")),
                     tuple(map(str, n.meta["val"].stride())) if isinstance(n.meta.get("val"), torch.Tensor) else None,
                     n.meta.get("torch_fn"))
                    for n in gm.graph.nodes]
            graphs.append((gm.code, meta))
            return make_boxed_func(gm)

        torch.manual_seed(0)
        args = (torch.randn(4, 6, requires_grad=True), torch.randn(6, 3, requires_grad=True), torch.randn(3))
        g = aot_function(f, fw_compiler=keep, bw_compiler=keep, dynamic=dynamic)
        g(*args).backward()
        return graphs

    for dynamic in (False, True):
        fastfake.reset_stats()
        fast = run(dynamic)
        assert fastfake.stats()["detach.fast"] > 0, fastfake.stats()
        fastfake.uninstall()
        stock = run(dynamic)
        fastfake.install()
        assert len(fast) == len(stock) == 2
        assert fast == stock


def _stock_outcome(fn, *args):
    try:
        return ("ok", describe(fn(*args)))
    except Exception as e:  # noqa: BLE001
        return (type(e), str(e))


@pytest.mark.parametrize(
    "args",
    [
        (),
        (None,),
        (None, None),
        ("mode", None),
        ("mode", 3),
        (None, "fake"),
        ("mode", "real"),
        ("mode", "fake", False, 1),
    ],
)
def test_bad_arguments_get_stocks_outcome(args):
    mode = FakeTensorMode()
    with mode:
        fake = torch.empty(2)
    subst = {"mode": mode, "fake": fake, "real": torch.empty(2)}
    call = tuple(subst.get(a, a) if isinstance(a, str) else a for a in args)
    fastfake.reset_stats()
    want = _stock_outcome(STOCK, *call)
    got = _stock_outcome(_C.fast_detach, *call)
    if want[0] == "ok":
        assert got[0] == "ok"
    else:
        assert got == want
    assert fastfake.stats()["detach.fast"] == 0


def test_keyword_arguments_go_to_stock():
    mode = FakeTensorMode()
    with mode:
        x = torch.empty(2)
    fastfake.reset_stats()
    got = _C.fast_detach(mode, x, include_real=False)
    assert describe(got) == describe(STOCK(mode, x, include_real=False))
    assert fastfake.stats()["detach.stock.arguments"] == 1


def test_unplain_cases_go_to_stock():
    class SubMode(FakeTensorMode):
        pass

    mode = FakeTensorMode()
    with mode:
        x = torch.empty(3)
    cases = []
    sub = SubMode()
    with sub:
        cases.append(("mode subclass", sub, sub.from_tensor(torch.empty(2))))
    own_keys = STOCK(mode, x)
    own_keys.dispatch_keys = torch._C._dispatch_keys(own_keys)
    cases.append(("own dispatch_keys", mode, own_keys))
    fastfake.reset_stats()
    for _, m, t in cases:
        got = _C.fast_detach(m, t)
        want = STOCK(m, t)
        assert describe(got) == describe(want)
    st = fastfake.stats()
    assert st["detach.fast"] == 0 and st["detach.stock.arguments"] + st["detach.stock.tensor"] == len(cases)


def test_real_tensor_snapshot_goes_to_stock():
    with torch._functorch.config.patch(fake_tensor_propagate_real_tensors=True):
        mode = FakeTensorMode()
        x = mode.from_tensor(torch.ones(3))
    assert x.real_tensor is not None
    fastfake.reset_stats()
    got = _C.fast_detach(mode, x, True)
    assert got.real_tensor is x.real_tensor
    assert fastfake.stats()["detach.stock.tensor"] == 1


def test_in_kernel_invocation_gets_stocks_error():
    mode = FakeTensorMode()
    with mode:
        x = torch.empty(3)
    with in_kernel_invocation_manager(mode):
        want = _stock_outcome(STOCK, mode, x)
        fastfake.reset_stats()
        got = _stock_outcome(_C.fast_detach, mode, x)
    assert got == want
    assert fastfake.stats()["detach.stock.state"] == 1


def test_torch_function_mode_goes_to_stock():
    from torch.overrides import TorchFunctionMode

    seen = []

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    mode = FakeTensorMode()
    with mode:
        x = torch.empty(3)
    fastfake.reset_stats()
    with Spy():
        _C.fast_detach(mode, x)
    stock_seen = list(seen)
    seen.clear()
    with Spy():
        STOCK(mode, x)
    assert stock_seen == seen
    assert fastfake.stats()["detach.stock.state"] == 1


def test_make_fx_and_fake_tensor_prop_graphs_identical():
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    def f(a, w, b):
        h = torch.relu(a @ w + b)
        return h.t().contiguous().view(-1).sum(), h[1:]

    def trace(mode_name):
        args = (torch.randn(4, 6), torch.randn(6, 3), torch.randn(3))
        gm = make_fx(f, tracing_mode=mode_name)(*args)
        meta = [(n.name, str(n.meta.get("val"))) for n in gm.graph.nodes]
        m = FakeTensorMode(shape_env=ShapeEnv() if mode_name == "symbolic" else None)
        FakeTensorProp(gm, m).propagate(*args)
        props = [(n.name, str(n.meta.get("val")), tuple(map(str, n.meta["val"].stride()))
                  if isinstance(n.meta.get("val"), torch.Tensor) else None) for n in gm.graph.nodes]
        return gm.code, meta, props

    for tracing in ("fake", "symbolic"):
        fastfake.reset_stats()
        fast = trace(tracing)
        assert fastfake.stats()["detach.fast"] > 0
        fastfake.uninstall()
        stock = trace(tracing)
        fastfake.install()
        assert fast == stock


def test_uninstall_restores_stock_and_crosscheck_wraps():
    fastfake.uninstall()
    assert proxy_tensor.fast_detach is STOCK is fake_impls.fast_detach
    fastfake.install(crosscheck=True)
    assert proxy_tensor.fast_detach is _detach.checked
    mode = FakeTensorMode()
    with mode:
        x = torch.empty(2, 3)
    assert describe(proxy_tensor.snapshot_fake(x)) == describe(STOCK(mode, x))
    fastfake.install()
    assert proxy_tensor.fast_detach is _C.fast_detach


def test_crosscheck_catches_a_wrong_snapshot(monkeypatch):
    def wrong(mode, x, include_real=False):
        out = _C.fast_detach(mode, x, include_real)
        return out.requires_grad_(True) if out.dtype.is_floating_point else out

    monkeypatch.setattr(_detach, "fast", wrong)
    fastfake.install(crosscheck=True)
    mode = FakeTensorMode()
    with mode:
        x = torch.empty(2, 3)
    with pytest.raises(fastfake.CrosscheckError, match="fast_detach differs from stock in requires_grad"):
        proxy_tensor.snapshot_fake(x)


def test_disabled_by_environment(monkeypatch):
    fastfake.uninstall()
    monkeypatch.setenv("FASTFAKE_NO_FAST_DETACH", "1")
    fastfake.install()
    assert proxy_tensor.fast_detach is STOCK
    monkeypatch.delenv("FASTFAKE_NO_FAST_DETACH")
    fastfake.uninstall()
    fastfake.install()
    assert proxy_tensor.fast_detach is _C.fast_detach
