"""The proven-source digests (fastfake/common/compat.py): read from each function's code
span first (no tokenizer), from inspect's block when that is not a proven text."""
from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from torch.fx.experimental.sym_node import SymNode

from fastfake.common import compat as _compat
from fastfake.common import stock_sources as stock_lists

SOURCE = '''
import functools

def deco(f):
    @functools.wraps(f)
    def inner(*a):
        return f(*a)
    return inner

@deco
def proven(x,
           y=2):
    # a comment inside
    z = (x +
         y)
    return [z for _ in range(2)]

def trailing(x):
    return x + 1
    pass
    # nothing after this

def changed(x):
    return x + 2
'''


@pytest.fixture
def mod(tmp_path):
    path = tmp_path / "fastfake_sources_probe.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location("fastfake_sources_probe", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    yield m
    sys.modules.pop("fastfake_sources_probe", None)


def _stock_sources():
    out = list(stock_lists.fake_prop_functions()) + [SymNode.expr.fget, SymNode.maybe_as_int]
    methods = stock_lists.symnode_binary_methods()
    if methods:
        out += [methods[0][2], methods[0][2].__wrapped__]
    return out


def test_code_span_is_inspects_block_on_this_release():
    # so every proven digest here is found without the tokenizer
    for fn in _stock_sources():
        assert _compat._code_span_source(fn) == _compat._normalised_source(fn), fn


def test_code_span_of_decorated_and_multiline_functions(mod):
    assert _compat._code_span_source(mod.proven) == _compat._normalised_source(mod.proven)
    text = _compat._code_span_source(mod.proven)
    assert text.startswith("@deco\ndef proven(x,") and text.endswith("return [z for _ in range(2)]")
    # trailing lines without code are not in the span, but are in inspect's block
    assert _compat._code_span_source(mod.trailing) == "def trailing(x):\nreturn x + 1"
    assert _compat._normalised_source(mod.trailing).endswith("pass\n# nothing after this")


def test_source_digest_decides(mod):
    def digest_of(fn):
        return lambda source: source(fn)

    span = _compat._digest(_compat._code_span_source(mod.trailing))
    block = _compat._digest(_compat._normalised_source(mod.trailing))
    assert span != block
    # proven as its code span: the same code, trailing no-op lines aside
    assert _compat._source_digest(digest_of(mod.trailing), {span: "x"}) == span
    # proven as inspect's block
    assert _compat._source_digest(digest_of(mod.trailing), {block: "x"}) == block
    # not proven: inspect's block's digest, found in no table
    assert _compat._source_digest(digest_of(mod.changed), {span: "x", block: "x"}) not in (span, block)
    # unreadable source: None
    ns: dict = {}
    exec("def nofile(x):\n    return x\n", ns)
    assert _compat._source_digest(digest_of(ns["nofile"]), {span: "x"}) is None


def test_every_table_digest_of_this_release_is_found():
    release = torch.__version__.split("+")[0]

    def proven_here(table) -> bool:
        return any(release in str(v) for v in table.values())

    cases = [
        (_compat.FAKE_PROP_SOURCES, _compat.fake_prop_source_digest),
        (_compat.SYMNODE_EXPR_SOURCES, _compat.symnode_expr_source_digest),
        (_compat.SYMNODE_MAYBE_AS_INT_SOURCES,
         lambda: _compat.symnode_maybe_as_int_source_digest(SymNode.maybe_as_int)),
        (_compat.SYMNODE_BINARY_SOURCES, _compat.symnode_binary_source_digest),
        (_compat.PYTREE_SOURCES, _compat.pytree_source_digest),
        (_compat.PYTREE_FX_SOURCES, _compat.pytree_fx_source_digest),
        (_compat.STORE_SOURCES, _compat.store_source_digest),
        (_compat.FUNCNAMES_SOURCES, _compat.funcnames_source_digest),
        (_compat.CONFIG_ATTR_SOURCES, _compat.config_attr_source_digest),
        (_compat.FUNCTIONAL_DISPATCH_SOURCES, _compat.functional_dispatch_source_digest),
    ]
    checked = 0
    for table, digest in cases:
        if proven_here(table):
            assert digest() in table, digest
            checked += 1
    assert checked > 0


def _reference_last_code_line(code) -> int:
    """What ``_C.last_code_line`` answers, in Python."""
    last = code.co_firstlineno
    for _, end, _, _ in code.co_positions():
        if end is not None and end > last:
            last = end
    for c in code.co_consts:
        if isinstance(c, type(code)):
            last = max(last, _reference_last_code_line(c))
    return last


def test_last_code_line_is_the_reference_walk(mod):
    import types

    import torch._subclasses.fake_tensor as ft
    import torch.fx.experimental.symbolic_shapes as ss

    codes = [mod.proven.__wrapped__.__code__, mod.trailing.__code__, compile("x = (1 +\n 2)\n", "<probe>", "exec")]
    for m in (ft, ss):
        for v in vars(m).values():
            for f in [v, *vars(v).values()] if isinstance(v, type) else [v]:
                if isinstance(getattr(f, "__code__", None), types.CodeType):
                    codes.append(f.__code__)
    assert len(codes) > 300
    for c in codes:
        assert _compat._last_code_line(c) == _reference_last_code_line(c), c
    with pytest.raises(TypeError):
        _compat._last_code_line("not code")
