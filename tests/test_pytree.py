"""pytree maps in C at the tracing modules' call sites (fastfake/tracing/pytree.py,
csrc/tracing/pytree.cpp): long random trees against stock's functions (results,
container types and freshness, dict key order, leaf identity, the order of the
calls, errors), every way a call goes to stock, the view's install / uninstall,
the self-test, crosscheck, and whole AOTAutograd traces."""
from __future__ import annotations

import collections
import random
import sys
import types

import pytest
import torch
import torch.utils._pytree as stock_pytree
from torch._subclasses import functional_tensor

import fastfake
from fastfake import _C
from fastfake.tracing import pytree as _pytree
from faults import fault_turns_off_only, unknown_source_stays_stock

pytestmark = pytest.mark.skipif(not _pytree.available(), reason="pytree: stock's sources not proven here")

_VIEW_ON = ("__import__('torch._subclasses.functional_tensor', fromlist=['_']).pytree "
            "is not __import__('torch.utils._pytree', fromlist=['_'])")
STOCK_MAP_ONLY, STOCK_MAP, STOCK_LEAVES = stock_pytree.tree_map_only, stock_pytree.tree_map, stock_pytree.tree_leaves
STOCK_ITER = stock_pytree.tree_iter
STOCK = {"tree_map_only": STOCK_MAP_ONLY, "tree_map": STOCK_MAP, "tree_leaves": STOCK_LEAVES, "tree_iter": STOCK_ITER}
Point = collections.namedtuple("Point", "a b")


class Registered:
    """A pytree node type registered by the tests."""

    def __init__(self, *items):
        self.items = list(items)


def _fast():
    _pytree.setup()
    return dict(zip(("tree_map_only", "tree_map", "tree_leaves", "tree_iter"), _C.pytree_functions()))


def _leaf(rng: random.Random, t: torch.Tensor):
    return rng.choice([
        lambda: t, lambda: t[0], lambda: rng.randint(-3, 3), lambda: 2.5, lambda: "k", lambda: None,
        lambda: True, lambda: torch.float32, lambda: b"x", lambda: (lambda: 0), lambda: Registered,
    ])()


def _tree(rng: random.Random, t: torch.Tensor, depth: int, plain: bool, fx: bool = False):
    r = rng.random()
    if depth > 3 or r < 0.3:
        return _leaf(rng, t)
    n = rng.randint(0, 4)
    kids = [_tree(rng, t, depth + 1, plain, fx) for _ in range(n)]
    kinds = ["tuple", "list", "dict"]
    if fx:
        kinds += ["immutable", "immutable_dict"]
    elif not plain:
        kinds += ["point", "odict", "deque", "size", "registered", "immutable", "immutable_dict"]
    kind = rng.choice(kinds)
    if kind == "tuple":
        return tuple(kids)
    if kind == "list":
        return kids
    if kind == "dict":
        keys = rng.sample(["b", "a", 1, 0, (2, 3), "zz", 7, "c"], n)
        return dict(zip(keys, kids))
    if kind == "point":
        return Point(kids[0] if kids else None, len(kids))
    if kind == "odict":
        return collections.OrderedDict(zip("yxw", kids))
    if kind == "deque":
        return collections.deque(kids)
    if kind == "size":
        return torch.Size([2, 3][:n])
    if kind == "registered":
        return Registered(*kids)
    from torch.fx.immutable_collections import immutable_dict, immutable_list

    if kind == "immutable_dict":
        return immutable_dict(zip(rng.sample(["b", "a", 1, 0, "zz", 7], n), kids))
    return immutable_list(kids)


def _shape(x) -> object:
    """Types at every level, dict keys in order, leaves by identity."""
    if isinstance(x, (tuple, list, collections.deque)):  # (namedtuples, torch.Size, immutable_list)
        return (type(x).__name__, id(x), [_shape(v) for v in x])
    if isinstance(x, dict):
        return (type(x).__name__, id(x), [(k, _shape(v)) for k, v in x.items()])
    if isinstance(x, Registered):
        return ("Registered", id(x), [_shape(v) for v in x.items])
    return ("leaf", id(x))


def _outcome(fn, *args):
    """(result shape, calls made, error) of one map."""
    calls: list = []
    fail_at = args[-1]

    def func(v):
        calls.append(id(v))
        if len(calls) == fail_at:
            raise ValueError(f"call {len(calls)}")
        return _MAPPED.setdefault(id(v), object())  # one object per leaf, the same in both runs

    try:
        if fn in ("tree_map_only", "tree_map_only_tuple"):
            pred = torch.Tensor if fn == "tree_map_only" else (int, str)
            out = FUNCS[0]["tree_map_only"](pred, func, args[0])
        elif fn == "tree_map":
            out = FUNCS[0]["tree_map"](func, args[0])
        elif fn == "tree_iter":
            out = []
            for v in FUNCS[0]["tree_iter"](args[0]):  # (as Graph.create_node loops)
                out.append(v)
                calls.append(id(v))
        else:
            out = FUNCS[0]["tree_leaves"](args[0])
        return _shape(out), calls, None, out
    except Exception as e:  # noqa: BLE001 - compared with stock's
        return None, calls, (type(e).__name__, str(e)), None


FUNCS: list[dict] = [{}]
_MAPPED: dict = {}


@pytest.fixture(autouse=True, scope="module")
def _registered():
    stock_pytree.register_pytree_node(Registered, lambda r: (r.items, None), lambda items, _: Registered(*items),
                                      serialized_type_name="test_pytree.Registered")
    yield
    stock_pytree._deregister_pytree_node(Registered)


def _compare(tree, fail_at: int, served: collections.Counter) -> None:
    stock = STOCK
    fast = _fast()
    for fn in ("tree_map_only", "tree_map_only_tuple", "tree_map", "tree_leaves", "tree_iter"):
        before = dict(_C.pytree_counts())
        FUNCS[0] = fast
        f = _outcome(fn, tree, fail_at)
        after = dict(_C.pytree_counts())
        FUNCS[0] = stock
        s = _outcome(fn, tree, fail_at)
        assert f[1] == s[1], (fn, "calls")
        assert f[2] == s[2], (fn, "error")
        if s[2] is None:
            # the same structure; leaves identical; containers fresh where stock's are
            sf, ss = f[0], s[0]
            assert _strip_ids(sf) == _strip_ids(ss), fn
            assert _fresh(f[3], tree) == _fresh(s[3], tree), fn
        served.update(k for k in after if after[k] != before.get(k, 0))


def _strip_ids(shape):
    """The shape with container ids dropped (fresh objects differ) but leaf ids kept."""
    kind = shape[0]
    if kind == "leaf":
        return shape
    if kind in ("dict", "OrderedDict", "defaultdict", "immutable_dict"):
        return (kind, [(k, _strip_ids(v)) for k, v in shape[2]])
    return (kind, [_strip_ids(v) for v in shape[2]])


def _fresh(result, tree):
    """Which containers of ``result`` are ``tree``'s own objects."""
    if type(tree) in (tuple, list) and type(result) is type(tree):
        return [result is tree, [_fresh(a, b) for a, b in zip(result, tree)]]
    if type(tree) is dict and type(result) is dict:
        return [result is tree, [_fresh(result[k], tree[k]) for k in tree if k in result]]
    return result is tree


@pytest.mark.parametrize("seed", range(6))
def test_random_trees_match_stock(seed):
    rng = random.Random(seed)
    t = torch.randn(2, 3)
    served: collections.Counter = collections.Counter()
    for i in range(400):
        plain = rng.random() < 0.7
        tree = _tree(rng, t, 0, plain)
        _compare(tree, rng.choice([0, 0, 1, 2, 3]), served)
    # both paths were taken: served calls, and every kind of stock hand-off by node
    assert served["map_only.served"] > 100 and served["map.served"] > 100 and served["leaves.served"] > 100, served
    assert served["iter.served"] > 100, served
    assert served["stock.node"] > 50, served


def _has_fx_container(tree) -> bool:
    from torch.fx.immutable_collections import immutable_dict, immutable_list

    if type(tree) in (immutable_list, immutable_dict):
        return True
    if type(tree) in (tuple, list):
        return any(_has_fx_container(v) for v in tree)
    if type(tree) is dict:
        return any(_has_fx_container(v) for v in tree.values())
    return False


@pytest.mark.parametrize("seed", range(3))
def test_fx_containers_are_lists_and_dicts_for_the_leaves(seed):
    """FX's immutable_list / immutable_dict (Graph.create_node's arguments) in random
    trees: tree_leaves and tree_iter flatten them in C with stock's leaves in stock's
    order; the maps (which would rebuild them as their own types) leave them to stock."""
    if _pytree._fx_containers()[0] is None:
        pytest.skip("FX's immutable containers are not proven here")
    rng = random.Random(100 + seed)
    t = torch.randn(2, 3)
    fast = _fast()
    with_fx = 0
    for _ in range(300):
        tree = _tree(rng, t, 0, True, fx=True)
        before = dict(_C.pytree_counts())
        _compare(tree, rng.choice([0, 0, 1, 2]), collections.Counter())
        after = dict(_C.pytree_counts())
        if _has_fx_container(tree):
            with_fx += 1
            assert after["leaves.served"] == before["leaves.served"] + 1
            assert after["iter.served"] == before["iter.served"] + 1
            assert after["map.served"] == before["map.served"], "a map rebuilt an FX container"
            assert fast  # (the maps went to stock: counted as nodes)
            assert after["stock.node"] == before["stock.node"] + 3
    assert with_fx > 100, with_fx


@pytest.mark.parametrize("change", ["values", "keys", "iter", "registry", "subclass"])
def test_a_changed_fx_container_goes_to_stock(monkeypatch, change):
    """An immutable_dict whose ``values`` / ``keys`` are not dict's, an immutable_list
    iterating otherwise, another registry entry, or a subclass: stock's flatten decides."""
    from torch.fx import immutable_collections as ic

    if _pytree._fx_containers()[0] is None:
        pytest.skip("FX's immutable containers are not proven here")
    fast = _fast()
    tree = [ic.immutable_dict(a=1, b=ic.immutable_list([2, 3]))]
    if change == "values":
        monkeypatch.setattr(ic.immutable_dict, "values", lambda self: [9, 9], raising=False)
    elif change == "keys":
        monkeypatch.setattr(ic.immutable_dict, "keys", lambda self: ["b", "a"], raising=False)
    elif change == "iter":
        monkeypatch.setattr(ic.immutable_list, "__iter__", lambda self: iter([7, 7]), raising=False)
    elif change == "registry":
        d = stock_pytree.SUPPORTED_NODES[ic.immutable_list]
        monkeypatch.setitem(stock_pytree.SUPPORTED_NODES, ic.immutable_list,
                            d._replace())  # (an equal entry, not the one seen at setup)
    else:
        class Sub(ic.immutable_list):
            pass

        stock_pytree.register_pytree_node(Sub, lambda x: (list(x)[::-1], None), lambda xs, _: Sub(xs),
                                          serialized_type_name="test_pytree.Sub")
        monkeypatch.setattr(stock_pytree, "_test_sub", Sub, raising=False)
        tree = [Sub([1, 2]), ic.immutable_list([3])]
    try:
        before = _C.pytree_counts()["stock.node"]
        assert fast["tree_leaves"](tree) == STOCK_LEAVES(tree)
        assert list(fast["tree_iter"](tree)) == list(STOCK_ITER(tree))
        assert _C.pytree_counts()["stock.node"] == before + 2
    finally:
        if change == "subclass":
            stock_pytree._deregister_pytree_node(stock_pytree._test_sub)
    monkeypatch.undo()
    assert fast["tree_leaves"]([ic.immutable_dict(a=1, b=ic.immutable_list([2, 3]))]) == [1, 2, 3]


def test_unproven_fx_containers_go_to_stock(monkeypatch):
    from torch.fx import immutable_collections as ic

    from fastfake.common import compat

    fast = _fast()
    tree = (1, ic.immutable_list([2]))
    monkeypatch.setattr(compat, "PYTREE_FX_SOURCES", {})
    compat.pytree_fx_source_digest.cache_clear()
    try:
        assert _pytree._fx_containers() == (None, None, None, None)
        _C.setup_pytree_fx(*_pytree._fx_containers())
        before = _C.pytree_counts()["stock.node"]
        assert fast["tree_leaves"](tree) == [1, 2]
        assert _C.pytree_counts()["stock.node"] == before + 1
    finally:
        monkeypatch.undo()
        compat.pytree_fx_source_digest.cache_clear()
        _C.setup_pytree_fx(*_pytree._fx_containers())
    before = _C.pytree_counts()["leaves.served"]
    assert fast["tree_leaves"](tree) == [1, 2]
    assert _C.pytree_counts()["leaves.served"] == before + 1


def test_random_comparison_sees_a_wrong_answer():
    """The comparison above can fail: with tuples rebuilt as lists it differs."""
    rng = random.Random(0)
    t = torch.randn(2, 3)
    _C._inject_fault(10**6, "pytree")
    failures = 0
    try:
        for _ in range(200):
            try:
                _compare(_tree(rng, t, 0, True), 0, collections.Counter())
            except AssertionError:
                failures += 1
    finally:
        _C._inject_fault(0, "pytree")
    assert failures > 20, failures


class _Loud:
    """A callable whose attribute reads are recorded (functools.wraps reads them)."""

    reads: list = []

    def __call__(self, v):
        return v

    def __getattribute__(self, name):
        _Loud.reads.append(name)
        return object.__getattribute__(self, name)


@pytest.mark.parametrize("case,reason", [
    (lambda f: f["tree_map_only"](torch.Tensor, lambda v: v, [1], is_leaf=None), "stock.arguments"),
    (lambda f: f["tree_map_only"](torch.Tensor, lambda v: v, [1], lambda x: False), "stock.arguments"),
    (lambda f: f["tree_map"](lambda a, b: a, [1], [2]), "stock.arguments"),
    (lambda f: f["tree_leaves"]([1], lambda x: False), "stock.arguments"),
    (lambda f: f["tree_map_only"](lambda v: True, lambda v: v, [1]), "stock.predicate"),
    (lambda f: f["tree_map_only"](int | str, lambda v: v, [1]), "stock.predicate"),
    (lambda f: f["tree_map_only"]((int, "x"), lambda v: v, [1]), "stock.predicate"),
    (lambda f: f["tree_map_only"](int, _Loud(), [1]), "stock.function"),
    (lambda f: f["tree_map"](lambda v: v, [Point(1, 2)]), "stock.node"),
    (lambda f: f["tree_leaves"]((torch.Size([1]),)), "stock.node"),
    (lambda f: f["tree_leaves"]([Registered(1)]), "stock.node"),
    (lambda f: f["tree_leaves"](_deep(80)), "stock.depth"),
    (lambda f: list(f["tree_iter"]([1], lambda x: False)), "stock.arguments"),
    (lambda f: list(f["tree_iter"]([Point(1, 2)])), "stock.node"),
    (lambda f: type(f["tree_iter"]((1, Point(1, 2)))).__name__, "stock.node"),  # stock's generator
])
def test_what_goes_to_stock_gets_stock_s_answer(case, reason):
    fast = _fast()
    stock = STOCK

    def run(f):
        _Loud.reads.clear()
        try:
            return repr(case(f)), list(_Loud.reads)
        except Exception as e:  # noqa: BLE001
            return f"{type(e).__name__}: {e}", list(_Loud.reads)

    before = _C.pytree_counts()[reason]
    assert run(fast) == run(stock)
    assert _C.pytree_counts()[reason] == before + 1


def _deep(n: int):
    x: list = [1]
    for _ in range(n):
        x = [x]
    return x


def test_a_cycle_raises_stock_s_error():
    a: list = [1]
    a.append(a)
    fast = _fast()
    with pytest.raises(RecursionError):
        STOCK_LEAVES(a)
    with pytest.raises(RecursionError):
        fast["tree_leaves"](a)


def test_a_registered_type_is_a_node_at_once():
    """A type registered after setup is no longer a leaf for the C path."""

    class Late:
        def __init__(self, x):
            self.x = x

    fast = _fast()
    tree = [Late(torch.ones(1))]
    assert fast["tree_leaves"](tree) == tree
    stock_pytree.register_pytree_node(Late, lambda o: ([o.x], None), lambda xs, _: Late(xs[0]),
                                      serialized_type_name="test_pytree.Late")
    try:
        assert fast["tree_leaves"](tree) == STOCK_LEAVES(tree) == [tree[0].x]
    finally:
        stock_pytree._deregister_pytree_node(Late)


def test_a_metaclass_with_its_own_hash_goes_to_stock():
    class Meta(type):
        def __hash__(cls):
            return 1

        def __eq__(cls, other):
            return cls is other

    class Odd(metaclass=Meta):
        pass

    fast = _fast()
    before = _C.pytree_counts()["stock.node"]
    o = Odd()
    assert fast["tree_leaves"]([o]) == [o]
    assert _C.pytree_counts()["stock.node"] == before + 1


def test_install_points_the_call_sites_at_the_view_and_uninstall_puts_the_module_back():
    fastfake.uninstall()
    mods = [__import__(m, fromlist=["_"]) for m in _pytree.CALL_SITES]
    assert all(vars(m)["pytree"] is stock_pytree for m in mods)
    fastfake.install()
    try:
        assert all(isinstance(vars(m)["pytree"], types.ModuleType) and vars(m)["pytree"] is not stock_pytree
                   for m in mods)
        assert stock_pytree.tree_map_only is STOCK_MAP_ONLY  # torch.utils._pytree itself is never patched
        view = functional_tensor.pytree
        assert view.tree_map_only is not STOCK_MAP_ONLY and view.tree_flatten is stock_pytree.tree_flatten
        assert view.TreeSpec is stock_pytree.TreeSpec and "tree_map" in dir(view)
        assert view.tree_iter is STOCK_ITER
        import torch.fx.graph as fx_graph

        assert fx_graph.pytree.tree_iter is not STOCK_ITER and fx_graph.pytree.tree_map is STOCK_MAP
    finally:
        fastfake.uninstall()
    assert all(vars(m)["pytree"] is stock_pytree for m in mods)


def test_a_function_patched_in_torch_is_what_the_view_answers(monkeypatch):
    fastfake.install()
    try:
        seen = []

        def spy(*a, **k):
            seen.append(a)
            return STOCK_MAP(*a, **k)

        monkeypatch.setattr(stock_pytree, "tree_map", spy)
        assert functional_tensor.pytree.tree_map is spy
        monkeypatch.undo()
        assert functional_tensor.pytree.tree_map is not STOCK_MAP  # C again
    finally:
        fastfake.uninstall()


def test_dynamo_never_inlines_the_call_sites():
    """The view is never what a Dynamo trace of user code reads: Dynamo skips every
    module that gets it (proxy_tensor, which Dynamo inlines, keeps the module)."""
    from torch._dynamo import trace_rules

    for name in _pytree.CALL_SITES:
        assert trace_rules.check_file(sys.modules[name].__file__, is_inlined_call=True).skipped, name
    import torch.fx.experimental.proxy_tensor as proxy_tensor

    assert not trace_rules.check_file(proxy_tensor.__file__, is_inlined_call=True).skipped  # (why it is not one)


def test_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("FASTFAKE_DISABLE", "pytree")
    fastfake.install()
    try:
        assert functional_tensor.pytree is stock_pytree
    finally:
        fastfake.uninstall()


def _aot_graphs():
    from functorch.compile import aot_function, make_boxed_func

    codes: list = []

    def compiler(gm, _):
        codes.append(gm.code)
        return make_boxed_func(gm)

    def fn(a, b):
        parts = torch.split(a * 2, 2)
        m, v = torch.var_mean(b, 0, keepdim=True)
        c = a.clone()
        c.add_(1)
        return {"p": parts[0].sum() + parts[-1].sum(), "q": [m, v.add(1)]}, (c.t(),)

    for dynamic in (False, True):
        torch.manual_seed(0)
        a = torch.randn(4, 3, requires_grad=True)
        b = torch.randn(5, 3, requires_grad=True)
        res = aot_function(fn, fw_compiler=compiler, bw_compiler=compiler, dynamic=dynamic)(a, b)
        (res[0]["p"] + res[0]["q"][1].sum() + res[1][0].sum()).backward()
        codes.append(repr((a.grad, b.grad)))
    return codes


def test_aot_traces_are_stock_s_and_served():
    fastfake.uninstall()
    stock = _aot_graphs()
    fastfake.install(crosscheck=True)
    try:
        before = dict(_C.pytree_counts())
        fast = _aot_graphs()
        after = dict(_C.pytree_counts())
    finally:
        fastfake.uninstall()
    assert fast == stock
    assert after["map_only.served"] > before["map_only.served"]
    assert after["map.served"] > before["map.served"]
    if "pytree.tree_iter(" in __import__("inspect").getsource(torch.fx.graph.Graph.create_node):
        assert after["iter.served"] > before["iter.served"]


def test_crosscheck_catches_a_wrong_answer():
    fastfake.install(crosscheck=True)
    try:
        view = functional_tensor.pytree
        assert view.tree_map(lambda v: v, (1, [2])) == (1, [2])
        for empty in ((), [], {}, ((), [()])):  # (stock's empty tuple is CPython's one object too)
            assert view.tree_map(lambda v: v, empty) == empty
            assert view.tree_map_only(int, lambda v: v, empty) == empty
        _C._inject_fault(1, "pytree")
        with pytest.raises(fastfake.CrosscheckError, match="pytree"):
            view.tree_map(lambda v: v, (1, [2]))
        import torch.fx.graph as fx_graph

        assert list(fx_graph.pytree.tree_iter((1, [2]))) == [1, 2]
        _C._inject_fault(1, "pytree")
        with pytest.raises(fastfake.CrosscheckError, match="pytree"):
            fx_graph.pytree.tree_iter((1, [2]))
    finally:
        _C._inject_fault(0, "pytree")
        fastfake.uninstall()


def test_selftest_catches_a_wrong_answer():
    fault_turns_off_only('fastfake._C._inject_fault(10**6, "pytree")', "pytree", keep="cache", still_on=_VIEW_ON)


def test_unknown_source_stays_stock():
    unknown_source_stays_stock("PYTREE_SOURCES", "pytree", still_on=_VIEW_ON)
