"""Dynamo's function-name tables kept on disk (fastfake/store/funcnames.py).

What must hold: every table fastfake puts into ``funcname_cache.cache`` -- learned from
stock's code on the bytes it read, or served from a record -- is the table stock's
``_add_file`` builds for those bytes, items and order; errors are stock's; a record is
served only for the same bytes; a second process is served from the first's file and
a bad file is ignored and counted; ``crosscheck=True`` finds a record that is not
stock's; uninstall puts stock's function back.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

import fastfake
from fastfake.store import files, funcnames
from faults import fault_turns_off_only, unknown_source_stays_stock

pytestmark = pytest.mark.skipif(not funcnames.available(), reason="funcnames is not proven on this release")

from torch._dynamo import funcname_cache  # noqa: E402


def _stock_table(path: str) -> list | None:
    """What stock's own ``_add_file`` puts into the cache for ``path`` (items, in order)."""
    stock = funcnames._setup()[1]
    funcname_cache.cache.pop(path, None)
    stock(path)
    t = funcname_cache.cache.pop(path)
    return list(t.items())


def _fast_table(path: str) -> list:
    funcname_cache.cache.pop(path, None)
    funcname_cache.get_funcname(path, 1)  # through whatever _add_file is now
    return list(funcname_cache.cache.pop(path).items())


def _random_source(rng: random.Random) -> str:
    """A random but valid module: nested classes / (async) functions, decorators,
    multi-line strings holding 'def', comments, continuation lines, blank lines,
    tabs or spaces, non-ASCII text."""
    lines: list[str] = []
    if rng.random() < 0.3:
        lines.append("# -*- coding: utf-8 -*-")

    def block(depth: int, indent: str, unit: str) -> None:
        for _ in range(rng.randint(1, 4)):
            k = rng.randrange(9)
            name = f"n{rng.randrange(1000)}"
            if k == 0 and depth < 4:
                lines.append(f"{indent}class {name.upper()}:")
                block(depth + 1, indent + unit, unit)
            elif k in (1, 2) and depth < 4:
                if rng.random() < 0.3:
                    lines.append(f"{indent}@staticmethod")
                kw = "async def" if rng.random() < 0.2 else "def"
                if rng.random() < 0.3:
                    lines.append(f"{indent}{kw} {name}(")
                    lines.append(f"{indent}{unit}a,")
                    lines.append(f"{indent}):")
                else:
                    lines.append(f"{indent}{kw} {name}(a, b=1):")
                block(depth + 1, indent + unit, unit)
            elif k == 3:
                lines.append(f'{indent}s = """')
                lines.append("def not_a_function():")
                lines.append('"""')
            elif k == 4:
                lines.append(f"{indent}x = [1,")
                lines.append(f"{indent}     2]  # a comment with def in it")
            elif k == 5:
                lines.append("")
            elif k == 6:
                lines.append(f"{indent}t = '\u00e9t\u00e9 {name}'")
            elif k == 7:
                lines.append(f"{indent}y = 1 + \\")
                lines.append(f"{indent}    2")
            else:
                lines.append(f"{indent}pass")

    block(0, "", rng.choice(["    ", "  ", "\t"]))
    return "\n".join(lines) + ("\n" if rng.random() < 0.8 else "")


@pytest.fixture
def isolated():
    with funcnames.isolated():
        yield


# --------------------------------------------------------------------------- #
# One process
# --------------------------------------------------------------------------- #


def test_learned_and_served_tables_are_stocks_for_real_files(installed, isolated):
    import tokenize

    import torch

    here = os.path.dirname(torch.nn.modules.__file__)
    paths = sorted(os.path.join(here, n) for n in os.listdir(here) if n.endswith(".py"))[:25]
    paths += [funcname_cache.__file__, tokenize.__file__]
    for p in paths:
        want = _stock_table(p)
        assert _fast_table(p) == want, p  # learned (stock's code on the bytes read)
        assert _fast_table(p) == want, p  # served
    s = fastfake.stats()
    assert s["funcnames.learned"] == len(paths) and s["funcnames.served"] == len(paths), s


def test_long_random_sequence_of_files_asks_and_drops(installed, isolated, tmp_path):
    """Random modules, asked in a random order, the table dropped at random, files
    rewritten in place with other contents (same name): every table is stock's for
    the bytes the file holds then, and answers the same names for every line."""
    rng = random.Random(7)
    paths = [str(tmp_path / f"m{i}.py") for i in range(12)]
    for p in paths:
        with open(p, "w", encoding="utf-8") as f:
            f.write(_random_source(rng))
    for step in range(400):
        p = rng.choice(paths)
        if rng.random() < 0.1:
            with open(p, "w", encoding="utf-8") as f:
                f.write(_random_source(rng))
        want = _stock_table(p)
        funcname_cache.cache.pop(p, None)
        names = [funcname_cache.get_funcname(p, n) for n in range(1, 60)]
        got = list(funcname_cache.cache[p].items())
        assert got == want, (step, p)
        assert names == [dict(want).get(n) for n in range(1, 60)]
        if rng.random() < 0.5:
            funcname_cache.cache.pop(p, None)
    s = fastfake.stats()
    assert s["funcnames.served"] > 100 and s["funcnames.learned"] >= 12, s


def test_the_table_is_of_the_bytes_read_not_of_a_later_file(installed, isolated, tmp_path):
    """Stock's code runs on the bytes fastfake read: a file rewritten after the read
    cannot give the record another file's table."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("def f():\n    return 1\n")
    b.write_text("class C:\n    def g(self):\n        pass\n")
    module, stock, _ = funcnames._setup()
    module.cache.pop(str(a), None)
    assert funcnames._stock_on(stock, b.read_bytes(), str(a))  # the path holds a's bytes
    assert list(module.cache.pop(str(a)).items()) == _stock_table(str(b))


@pytest.mark.parametrize("content", [
    b"def f(:\n    '''unterminated\n",  # a TokenError: stock's empty table
    b"\xef\xbb\xbfdef f():\n    pass\n",  # a BOM
    b"# -*- coding: latin-1 -*-\ns = '\xe9'\ndef g():\n    pass\n",
    b"\tdef f():\n\t\tpass\n",
    b"",
], ids=["token error", "bom", "latin-1", "tabs", "empty"])
def test_odd_files_are_stocks(installed, isolated, tmp_path, content):
    p = tmp_path / "odd.py"
    p.write_bytes(content)
    want = _stock_table(str(p))
    assert _fast_table(str(p)) == want
    assert _fast_table(str(p)) == want


def test_stocks_errors(installed, isolated, tmp_path):
    """A bad encoding declaration: stock's own error, from stock's own read; a file
    that cannot be read: stock's empty table."""
    p = tmp_path / "bad.py"
    p.write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    funcname_cache.cache.pop(str(p), None)
    stock = funcnames._setup()[1]
    with pytest.raises(SyntaxError) as want:
        stock(str(p))
    with pytest.raises(SyntaxError) as got:
        funcname_cache.get_funcname(str(p), 1)
    assert str(got.value) == str(want.value)
    missing = str(tmp_path / "missing.py")
    assert funcname_cache.get_funcname(missing, 1) is None
    assert funcname_cache.cache.pop(missing) == {}
    s = fastfake.stats()
    assert s["funcnames.stock.error"] == 1 and s["funcnames.stock.unreadable"] == 1, s


def test_an_invalid_record_is_dropped_and_counted(installed, isolated, tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n    pass\n")
    want = _stock_table(str(p))
    _fast_table(str(p))
    (name,) = list(funcnames._kept.records)
    funcnames._kept.records[name] = {"names": ["f"], "lines": [2, 5]}  # an index out of range
    assert _fast_table(str(p)) == want
    assert fastfake.stats()["funcnames.invalid"] == 1


def test_crosscheck_finds_a_record_that_is_not_stocks(tmp_path):
    from fastfake.parity.crosscheck import CrosscheckError

    fastfake.install(crosscheck=True)
    with funcnames.isolated():
        p = tmp_path / "m.py"
        p.write_text("def f():\n    pass\n")
        _fast_table(str(p))
        _fast_table(str(p))  # a good record: stock's again
        (name,) = list(funcnames._kept.records)
        funcnames._kept.records[name] = {"names": ["g"], "lines": [1, 0, 2, 0]}
        with pytest.raises(CrosscheckError):
            _fast_table(str(p))
    assert fastfake.stats()["funcnames.served"] == 0


def test_bounded(installed, isolated, tmp_path, monkeypatch):
    monkeypatch.setattr(funcnames, "MAX_BYTES", 200)
    for i in range(6):
        p = tmp_path / f"m{i}.py"
        p.write_text(f"def f{i}():\n    pass\n" * 3)
        _fast_table(str(p))
    assert funcnames._kept.bytes <= 200
    assert fastfake.stats()["funcnames.full"] >= 1


def test_uninstall_puts_stocks_function_back_and_the_switch_keeps_it():
    stock = funcname_cache.__dict__["_add_file"]
    fastfake.install()
    assert funcname_cache._add_file is funcnames.add_file
    fastfake.uninstall()
    assert funcname_cache._add_file is stock
    os.environ["FASTFAKE_DISABLE"] = "funcnames"
    try:
        fastfake.install()
        assert funcname_cache._add_file is stock
    finally:
        del os.environ["FASTFAKE_DISABLE"]


_ON = ("__import__('torch')._dynamo.funcname_cache._add_file is "
       "__import__('fastfake.store.funcnames', fromlist=['x']).add_file")


def test_the_self_test_fails_a_wrong_table():
    """The self-test feature can fail: records decoded one line off turn funcnames
    (only) off."""
    fault_turns_off_only(
        "import fastfake.store.funcnames as fn; real = fn._decode; "
        "fn._decode = lambda rec: (lambda t: None if t is None else {k + 1: v for k, v in t.items()})(real(rec))",
        "funcnames", keep="cache", still_on=_ON,
    )


def test_not_offered_on_code_it_was_not_proven_on():
    unknown_source_stays_stock("FUNCNAMES_SOURCES", "funcnames", still_on=_ON)


# --------------------------------------------------------------------------- #
# Two processes
# --------------------------------------------------------------------------- #

PROGRAM = r"""
import json, os, sys
import torch, fastfake
fastfake.install()
from torch._dynamo import funcname_cache
from fastfake.store import funcnames
paths = json.loads(os.environ["FUNCNAMES_PATHS"])
stock = funcnames._setup()[1]
same = []
for p in paths:
    funcname_cache.cache.pop(p, None)
    funcname_cache.get_funcname(p, 1)
    got = list(funcname_cache.cache.pop(p).items())
    stock(p)
    same.append(got == list(funcname_cache.cache.pop(p).items()))
s = {k: v for k, v in fastfake.stats().items() if k.startswith("funcnames.")}
print("RESULT " + json.dumps({"same": same, "stats": s}))
"""


def _run(cache_dir, paths) -> dict:
    e = {**os.environ, "FASTFAKE_CACHE_DIR": str(cache_dir), "FUNCNAMES_PATHS": json.dumps(paths)}
    r = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=600, env=e)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _file(cache_dir) -> str:
    d = os.path.join(str(cache_dir), "store", "funcnames")
    (name,) = [n for n in os.listdir(d) if n.endswith(".json")]
    return os.path.join(d, name)


FAULTS = {
    "truncated": ("corrupt", lambda text: text[: len(text) // 2]),
    "garbage": ("corrupt", lambda text: "\x00not json"),
    "records edited, digest kept": ("corrupt", lambda text: text.replace('\\"f\\"', '\\"g\\"')),
    "foreign key": ("foreign", lambda text: json.dumps({**json.loads(text), "key": "f" * 40})),
    "stale format": ("stale", lambda text: json.dumps({**json.loads(text), "format": 0})),
}


def test_a_second_process_is_served_and_a_bad_file_is_ignored(tmp_path):
    cache_dir = tmp_path / "cache"
    src = tmp_path / "src"
    src.mkdir()
    rng = random.Random(3)
    paths = []
    for i in range(5):
        p = src / f"m{i}.py"
        p.write_text("def f():\n    pass\n" + _random_source(rng))
        paths.append(str(p))
    first = _run(cache_dir, paths)
    assert all(first["same"]) and first["stats"]["funcnames.learned"] == 5, first
    second = _run(cache_dir, paths)
    assert all(second["same"]), second
    assert second["stats"]["funcnames.served"] == 5 and second["stats"]["funcnames.file.loaded"] == 1, second
    # a file changed since: learned again, not served
    with open(paths[0], "a") as f:
        f.write("\ndef g():\n    pass\n")
    third = _run(cache_dir, paths)
    assert all(third["same"]) and third["stats"]["funcnames.served"] == 4, third
    assert third["stats"]["funcnames.learned"] == 1
    path = _file(cache_dir)
    good = open(path).read()
    for fault, (outcome, edit) in sorted(FAULTS.items()):
        with open(path, "w") as f:
            f.write(edit(good))
        got = _run(cache_dir, paths)
        assert all(got["same"]), (fault, got)
        assert got["stats"][f"funcnames.file.{outcome}"] == 1, (fault, got)
        assert got["stats"]["funcnames.served"] == 0, (fault, got)
    assert files.FORMAT == json.loads(good)["format"]
