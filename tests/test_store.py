"""The learned-record store (fastfake/store/): stock's misses on calls without symbols,
kept on disk by one process and served in the next.

What must hold: a process served from another's records gives every output stock
gives (sizes, strides, offset, storage bytes, dtype, device, layout, requires_grad,
conj / neg bits, view-ness) and leaves stock's cache and counters as fastfake
without the store does; the codec reads back exactly what it wrote and refuses
what it does not know; a truncated, corrupt, foreign, stale or tampered file is
ignored and counted; writers never corrupt the file, however many at once; the
file is bounded; ``crosscheck=True`` finds a record that no longer matches stock's
miss; nothing keeps a mode or tensor alive.
"""
from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import weakref

import pytest
import torch
from torch._subclasses import fake_tensor as ft

import fastfake
from fastfake.store import codec, files, records

pytestmark = pytest.mark.skipif(not records.available(), reason="the store is not proven on this release")

# A seeded random program of calls without symbols: prints one JSON line with the
# description of every output, stock's cache statistics and entries, and fastfake's
# store counters.
PROGRAM = r"""
import json, random, sys, os
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils import _stats
IMPL = os.environ["STORE_TEST_IMPL"]
if IMPL != "stock":
    import fastfake
    fastfake.install(crosscheck=os.environ.get("STORE_TEST_CROSSCHECK") == "1")
rng = random.Random(int(os.environ.get("STORE_TEST_SEED", "0")))
N = int(os.environ.get("STORE_TEST_N", "120"))

def desc(t):
    if not isinstance(t, torch.Tensor):
        return repr(t)
    return [list(t.shape), list(t.stride()), t.storage_offset(), t.untyped_storage().nbytes(), str(t.dtype),
            str(t.device), str(t.layout), t.requires_grad, t.is_conj(), t.is_neg(), t._is_view(),
            t._base is not None, t._version]

def call(name, fn):
    try:
        r = fn()
    except Exception as e:
        return [name, "raised", type(e).__name__, str(e)[:200]]
    rs = r if isinstance(r, (tuple, list)) else (r,)
    return [name, type(r).__name__, [desc(x) for x in rs]]

out = []
with FakeTensorMode() as mode:
    dts = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
    for i in range(N):
        a, b, c = rng.choice([2, 3, 4]), rng.choice([3, 5, 8]), rng.choice([4, 6])
        dt = rng.choice(dts)
        rg = rng.random() < 0.3
        x = torch.empty(a, b, dtype=dt, requires_grad=rg)
        w = torch.empty(b, c, dtype=dt)
        k = rng.randrange(16)
        if k == 0: out.append(call("mm", lambda: torch.mm(x, w)))
        elif k == 1: out.append(call("softmax", lambda: torch.softmax(x, -1)))
        elif k == 2: out.append(call("layer_norm", lambda: torch.nn.functional.layer_norm(x, (b,))))
        elif k == 3: out.append(call("var_mean", lambda: torch.var_mean(x, 1)))
        elif k == 4: out.append(call("sum", lambda: x.sum(rng.choice([0, 1]))))
        elif k == 5: out.append(call("cat", lambda: torch.cat([x, x], rng.choice([0, 1]))))
        elif k == 6: out.append(call("view", lambda: x.view(a * b)))
        elif k == 7: out.append(call("t", lambda: x.t()))
        elif k == 8: out.append(call("add_", lambda: x.detach().add_(1)))
        elif k == 9: out.append(call("addmm", lambda: torch.addmm(torch.empty(c, dtype=dt), x, w)))
        elif k == 10: out.append(call("mm mismatch", lambda: torch.mm(x, x)))
        elif k == 11: out.append(call("linear", lambda: torch.nn.functional.linear(x, w.t())))
        elif k == 12: out.append(call("bmm", lambda: torch.bmm(x.unsqueeze(0), w.unsqueeze(0))))
        elif k == 13: out.append(call("gelu", lambda: torch.nn.functional.gelu(x)))
        elif k == 14: out.append(call("contiguous", lambda: x.t().contiguous()))
        else: out.append(call("to", lambda: x.to(torch.float32)))
        if os.environ.get("STORE_TEST_TRACE") == "1":
            ci = FakeTensorMode.cache_info()
            out[-1].append([ci.hits, ci.misses])
        if i % 25 == 24 and os.environ.get("STORE_TEST_CLEAR") == "1":
            FakeTensorMode.cache_clear()
info = FakeTensorMode.cache_info()
res = {"outputs": out, "hits": info.hits, "misses": info.misses, "bypasses": dict(info.bypasses),
       "size": info.size, "entries": [str(k.key[0]) for k in FakeTensorMode.cache],
       "calls": dict(_stats.simple_call_counter)}
if IMPL != "stock":
    res["stats"] = {k: v for k, v in fastfake.stats().items() if k.startswith("store.")}
print("RESULT " + json.dumps(res))
"""


def _run(impl: str, cache_dir, *, seed: int = 0, n: int = 120, check: bool = True, **env: str) -> dict:
    e = {**os.environ, "STORE_TEST_IMPL": impl, "STORE_TEST_SEED": str(seed), "STORE_TEST_N": str(n),
         "FASTFAKE_CACHE_DIR": str(cache_dir), **env}
    if impl == "nostore":
        e["FASTFAKE_DISABLE"] = "store"
    r = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=600, env=e)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"returncode": r.returncode, "stderr": r.stderr[-3000:]}


def _records_in(path: str) -> list:
    """The records of a store file whose digest matches (the key is another
    process's: its installation key covers the fastfake modules it imported)."""
    with open(path) as f:
        data = json.load(f)
    assert data["format"] == files.FORMAT and files._digest(data["records"]) == data["digest"]
    return json.loads(data["records"])


def _store_file(cache_dir) -> str:
    d = os.path.join(str(cache_dir), "store")
    names = [n for n in os.listdir(d) if n.endswith(".json")]
    assert len(names) == 1, names
    return os.path.join(d, names[0])


@pytest.fixture
def cache_dir(tmp_path):
    # the self-test result first (so that every process below reads it, as a user's
    # second process would), without any learned records
    d = tmp_path / "cache"
    r = subprocess.run([sys.executable, "-c", "import torch, fastfake; fastfake.install()"], capture_output=True,
                       text=True, timeout=600, env={**os.environ, "FASTFAKE_CACHE_DIR": str(d),
                                                    "FASTFAKE_DISABLE": "store"})
    assert r.returncode == 0, r.stderr[-2000:]
    return d


# --------------------------------------------------------------------------- #
# Two processes
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("seed", [0, 1])
def test_second_process_is_served_and_equals_stock(cache_dir, seed):
    stock = _run("stock", cache_dir, seed=seed)
    first = _run("fastfake", cache_dir, seed=seed)
    assert first["stats"]["store.learned"] > 20, first["stats"]
    assert first["stats"]["store.file.absent"] == 1
    assert _records_in(_store_file(cache_dir))  # written at exit
    second = _run("fastfake", cache_dir, seed=seed)
    assert second["stats"]["store.file.loaded"] == 1
    assert second["stats"]["store.served"] > 20, second["stats"]
    nostore = _run("nostore", cache_dir, seed=seed)
    for got in (first, second, nostore):
        assert got["outputs"] == stock["outputs"]
    # stock's cache and counters as fastfake without the store leaves them
    for k in ("hits", "misses", "bypasses", "size", "entries", "calls"):
        assert second[k] == nostore[k] == first[k], k


def test_records_serve_after_cache_clear_in_one_process(cache_dir):
    """Learned state reused in one process: every 25 calls stock's cache is cleared;
    the calls after it are served from the records learned before."""
    stock = _run("stock", cache_dir, seed=3, n=200, STORE_TEST_CLEAR="1")
    fast = _run("fastfake", cache_dir, seed=3, n=200, STORE_TEST_CLEAR="1")
    nostore = _run("nostore", cache_dir, seed=3, n=200, STORE_TEST_CLEAR="1")
    assert fast["stats"]["store.served"] > 10, fast["stats"]
    assert fast["outputs"] == stock["outputs"] == nostore["outputs"]
    for k in ("hits", "misses", "bypasses", "size", "entries", "calls"):
        assert fast[k] == nostore[k], k


def test_another_seed_reads_the_records_it_shares(cache_dir):
    _run("fastfake", cache_dir, seed=0)
    stock = _run("stock", cache_dir, seed=5)
    got = _run("fastfake", cache_dir, seed=5)
    assert got["stats"]["store.served"] > 0
    assert got["outputs"] == stock["outputs"]


# --------------------------------------------------------------------------- #
# The file: faults
# --------------------------------------------------------------------------- #


def _rewrite(path: str, edit) -> None:
    with open(path) as f:
        data = json.load(f)
    data = edit(data)
    with open(path, "w") as f:
        if isinstance(data, str):
            f.write(data)
        else:
            json.dump(data, f)


def _redigest(data: dict) -> dict:
    data["digest"] = files._digest(data["records"])
    return data


def _edit_records(data: dict, edit) -> dict:
    recs = json.loads(data["records"])
    edit(recs)
    data["records"] = json.dumps(recs, separators=(",", ":"))
    return _redigest(data)


def _unknown_op(recs):
    recs[0][1]["op"] = ["aten", "no_such_op_here", "default"]


def _wrong_field(recs):
    for _, r in recs:
        r["entry"]["outputs"][0]["meta"] = {"dtype": ["dt", "float32"]}


FAULTS = {
    "truncated": ("corrupt", lambda d: json.dumps(d)[: len(json.dumps(d)) // 2]),
    "garbage": ("corrupt", lambda d: "\x00not json at all"),
    "not a dict": ("corrupt", lambda d: [1, 2, 3]),
    "digest": ("corrupt", lambda d: {**d, "digest": "0" * 40}),
    "records edited, digest kept": ("corrupt", lambda d: {**d, "records": d["records"].replace("float32", "float64")}),
    "foreign key": ("foreign", lambda d: {**d, "key": "f" * 40}),
    "stale format": ("stale", lambda d: {**d, "format": 0}),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_bad_file_is_ignored_and_counted(cache_dir, fault):
    stock = _run("stock", cache_dir)
    _run("fastfake", cache_dir)
    outcome, edit = FAULTS[fault]
    path = _store_file(cache_dir)
    _rewrite(path, edit)
    got = _run("fastfake", cache_dir)
    assert got["stats"][f"store.file.{outcome}"] == 1, got["stats"]
    assert got["stats"]["store.served"] == 0
    assert got["outputs"] == stock["outputs"]
    # and the next writer replaces it with a good file
    again = _run("fastfake", cache_dir)
    assert again["stats"]["store.file.loaded"] == 1 and again["stats"]["store.served"] > 0


@pytest.mark.parametrize("edit", [_unknown_op, _wrong_field], ids=["unknown op", "metadata fields"])
def test_an_invalid_record_is_ignored_and_counted(cache_dir, edit):
    stock = _run("stock", cache_dir)
    _run("fastfake", cache_dir)
    _rewrite(_store_file(cache_dir), lambda d: _edit_records(d, edit))
    got = _run("fastfake", cache_dir)
    assert got["stats"]["store.file.loaded"] == 1
    assert got["stats"]["store.invalid"] >= 1, got["stats"]
    assert got["outputs"] == stock["outputs"]


def test_crosscheck_finds_a_record_that_no_longer_matches_stock(cache_dir):
    """A record edited consistently (digest recomputed) passes the file's checks;
    crosscheck=True runs stock's miss and finds it."""
    _run("fastfake", cache_dir)

    def wrong_stride(recs):
        for _, r in recs:
            for o in r["entry"]["outputs"]:
                if o["meta"] is not None and len(o["meta"]["stride"][1]) == 2:
                    o["meta"]["stride"] = ["t", [1, 1]]

    _rewrite(_store_file(cache_dir), lambda d: _edit_records(d, wrong_stride))
    got = _run("fastfake", cache_dir, check=False, STORE_TEST_CROSSCHECK="1")
    assert "CrosscheckError" in got.get("stderr", ""), got
    assert "the kept record differs from what stock's miss does now" in got["stderr"]


def test_an_unwritable_directory_is_counted_never_an_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    stock = _run("stock", blocker)
    got = _run("fastfake", blocker)
    assert got["outputs"] == stock["outputs"]
    out = subprocess.run(
        [sys.executable, "-c", "import torch, fastfake; fastfake.install();"
         "from torch._subclasses.fake_tensor import FakeTensorMode as M\n"
         "with M():\n    torch.mm(torch.empty(2, 3), torch.empty(3, 4))\n"
         "fastfake.uninstall(); print(fastfake.stats()['store.file.write_failed'])"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "FASTFAKE_CACHE_DIR": str(blocker)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "1"


def test_writers_at_once_never_corrupt_the_file(cache_dir):
    e = {**os.environ, "STORE_TEST_IMPL": "fastfake", "FASTFAKE_CACHE_DIR": str(cache_dir)}
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM], env={**e, "STORE_TEST_SEED": str(s)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in (10, 11, 12)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.split("RESULT ", 1)[1]))
    recs = _records_in(_store_file(cache_dir))
    # (written at exit, one after another under the lock: each adds its own to what
    # the others left, unless it waited too long, which three small writers do not)
    names = {r[0] for r in recs}
    assert len(names) >= max(r["stats"]["store.learned"] for r in results)


# --------------------------------------------------------------------------- #
# In this process
# --------------------------------------------------------------------------- #


def _random_calls(rng: random.Random, n: int) -> None:
    for _ in range(n):
        a, b = rng.choice([1, 2, 3, 5]), rng.choice([2, 4, 7])
        dt = rng.choice([torch.float32, torch.float16, torch.int64, torch.bool, torch.complex64])
        x = torch.empty(a, b, dtype=dt)
        k = rng.randrange(8)
        try:
            if k == 0:
                x.sum(0)
            elif k == 1:
                torch.cat([x, x])
            elif k == 2:
                x.to(torch.float64)
            elif k == 3:
                x.reshape(b, a).contiguous()
            elif k == 4:
                torch.mm(x, x.t())
            elif k == 5:
                x.new_zeros(rng.randrange(1, 4), dtype=torch.float32)
            elif k == 6:
                torch.nn.functional.pad(x.float(), (1, rng.randrange(3)))
            else:
                torch.where(x.bool(), x, x)
        except Exception:  # noqa: BLE001 - errors are stock's; only entries matter here
            pass


@pytest.mark.parametrize("seed", range(3))
def test_codec_reads_back_every_entry_stock_makes(seed):
    ft.FakeTensorMode.cache_clear()
    with ft.FakeTensorMode():
        _random_calls(random.Random(seed), 300)
    kept = 0
    for key, entry in ft.FakeTensorMode.cache.items():
        text = codec.key_text(key)
        if text is not None:
            back = codec.key_from_text(text)
            assert back == key and hash(back) == hash(key)
            assert codec.key_text(back) == text
        enc = codec.encode_entry(entry)
        if enc is not None:
            assert codec.decode_entry(json.loads(json.dumps(enc))) == entry
            kept += 1
    assert kept > 50
    ft.FakeTensorMode.cache_clear()


@pytest.mark.parametrize("value", [
    ["op", "myns", "op", "default"],
    ["op", "aten", "no_such_op", "default"],
    ["ty", "os.system"],
    ["dt", "float33"],
    ["nope", 1],
    [],
    {"a": 1},
    ["t", [["f", "not hex"]]],
])
def test_codec_refuses_what_it_does_not_know(value):
    with pytest.raises(codec.Invalid):
        codec.decode(value)


def test_codec_keeps_floats_and_bools_exactly():
    for v in (0.1, -0.0, 1e-300, float("inf"), True, 1, None, "s", (1, 2.5), torch.Size([3, 4])):
        enc = codec.encode(v)
        back = codec.decode(json.loads(json.dumps(enc)))
        assert type(back) is type(v) and (back == v or (isinstance(v, float) and str(back) == str(v)))
    assert codec.encode(object()) is codec._MISSING


def test_the_file_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTFAKE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(files, "MAX_BYTES", 4000)
    saved = list(files._KEY)
    files.set_installation({"test": "bounded"})
    try:
        for i in range(10):
            assert files.write([[f"name-{i}-{j}", {"pad": "x" * 50}] for j in range(10)]) == "written"
        outcome, recs = files._read(files.path())
        assert outcome == "loaded"
        assert len(json.dumps(recs, separators=(",", ":"))) <= 4000
        names = [r[0] for r in recs]
        assert names[-1] == "name-9-9" and "name-0-0" not in names  # the oldest went first
    finally:
        files._KEY[:] = saved


def test_records_keep_no_mode_or_tensor_alive(installed):
    records.clear()
    mode = ft.FakeTensorMode()
    with mode:
        x = torch.empty(3, 7)
        y = torch.softmax(x, 0)
    refs = [weakref.ref(mode), weakref.ref(x), weakref.ref(y)]
    assert records._kept.new, "nothing was learned"
    del mode, x, y
    gc.collect()
    assert all(r() is None for r in refs)
    records.clear()


def test_off_serves_and_learns_nothing(monkeypatch):
    monkeypatch.setenv("FASTFAKE_DISABLE", "store")
    fastfake.install()
    records.clear()
    with ft.FakeTensorMode():
        torch.mm(torch.empty(2, 9), torch.empty(9, 2))
    assert not records._kept.new
    assert all(v == 0 for k, v in fastfake.stats().items() if k.startswith("store."))
