"""FakeTensor.device served by fastfake's C descriptor: same values and errors as stock."""
from __future__ import annotations

import pytest
import torch
import torch._functorch.config as functorch_config
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager

import fastfake
from fastfake.common import compat as _compat

DEVICE_DESCR_TYPE = "fastfake._C.DeviceDescriptor"


@pytest.fixture
def stock_device():
    prop = FakeTensor.__dict__["device"]
    assert isinstance(prop, property) and prop.fget.__module__ == "torch._subclasses.fake_tensor"
    return prop


@pytest.fixture
def mode():
    with functorch_config.patch(fake_tensor_allow_meta=True):
        m = FakeTensorMode()
    assert m.allow_meta
    return m


def _dev_counts():
    s = fastfake.stats()
    return s["device.fast"], s["device.stock"]


def _read(t):
    """(value, exception type, exception message) of t.device."""
    try:
        return t.device, None, None
    except Exception as e:  # noqa: BLE001
        return None, type(e), str(e)


DEVICES = ["cpu", "meta", "cuda", "cuda:0", "cuda:1"]


@pytest.mark.parametrize("dev", DEVICES)
def test_device_parity_outside_and_inside_kernel(mode, dev):
    with mode:
        t = torch.empty(2, 3, device=dev)
    assert type(t) is FakeTensor
    stock_out = t.device
    with in_kernel_invocation_manager(mode):
        stock_in = t.device
    assert stock_in == torch.device("meta")

    fastfake.install()
    assert type(FakeTensor.__dict__["device"]).__name__ == "DeviceDescriptor"
    fastfake.reset_stats()
    fast_out = t.device
    with in_kernel_invocation_manager(mode):
        fast_in = t.device
    assert _dev_counts() == (2, 0), "the descriptor did not serve these reads itself"

    assert type(fast_out) is torch.device and type(fast_in) is torch.device
    assert fast_out == stock_out and str(fast_out) == str(stock_out)
    assert fast_out.index == stock_out.index
    assert fast_in == stock_in == torch.device("meta")
    # still the stock value after the kernel-invocation block
    assert t.device == stock_out


@pytest.mark.parametrize("dev, expected", [("cuda", "cuda:0"), ("cuda:0", "cuda:0"), ("cuda:1", "cuda:1")])
def test_cuda_index_normalization_matches_stock(mode, dev, expected):
    with mode:
        stock_t = torch.empty(3, device=dev)
    stock = stock_t.device
    assert str(stock) == expected
    fastfake.install()
    with mode:
        t = torch.empty(3, device=dev)
        u = t + t
        w = t + t  # fast hit (built in C++)
    assert fastfake.stats()["elementwise.hit"] >= 1
    for x in (t, u, w, stock_t):
        assert x.device == stock, (x, x.device)
        assert x.device.index == stock.index


def test_device_of_fast_results_matches_stock(mode):
    with mode:
        a = torch.empty(4, device="cuda")
        b = torch.empty(4, device="cuda")
        stock_r = a * b
    fastfake.install()
    with mode:
        a * b  # admission
        fastfake.reset_stats()
        r = a * b
    assert fastfake.stats()["elementwise.hit"] == 1
    assert r.device == stock_r.device == torch.device("cuda:0")
    with in_kernel_invocation_manager(mode):
        assert r.device == torch.device("meta")
    fastfake.uninstall()
    assert r.device == stock_r.device


def test_class_access_returns_stock_property(stock_device):
    fastfake.install()
    installed = FakeTensor.__dict__["device"]
    assert type(installed).__name__ == "DeviceDescriptor"
    assert installed is not stock_device
    assert FakeTensor.device is stock_device
    assert isinstance(FakeTensor.device, property)
    fastfake.uninstall()
    assert FakeTensor.device is stock_device


def _exc(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e), e.args
    return None


def test_setting_device_raises_like_stock(mode):
    with mode:
        t = torch.empty(2)

    def set_it():
        t.device = torch.device("cpu")

    stock = _exc(set_it)
    assert stock is not None and stock[0] is NotImplementedError
    fastfake.install()
    assert _exc(set_it) == stock
    assert "device" not in t.__dict__
    assert t.device == torch.device("cpu")


def test_deleting_device_raises_like_stock(mode):
    with mode:
        t = torch.empty(2)

    def del_it():
        del t.device

    stock = _exc(del_it)
    assert stock is not None and stock[0] is AttributeError
    fastfake.install()
    assert _exc(del_it) == stock
    assert t.device == torch.device("cpu")


def test_missing_fake_mode_falls_back_to_stock(mode):
    with mode:
        t = torch.empty(2)
    saved = t.__dict__.pop("fake_mode")
    try:
        stock = _read(t)
        assert stock[1] is AttributeError and "fake_mode" in stock[2]
        fastfake.install()
        fastfake.reset_stats()
        assert _read(t) == stock
        assert _dev_counts() == (0, 1)
    finally:
        t.__dict__["fake_mode"] = saved
    assert t.device == torch.device("cpu")


def test_missing_fake_device_falls_back_to_stock(mode):
    with mode:
        t = torch.empty(2)
    attr = _compat.fake_device_attr()
    saved = t.__dict__.pop(attr)
    try:
        stock = _read(t)
        assert stock[1] is AttributeError
        fastfake.install()
        fastfake.reset_stats()
        assert _read(t) == stock
        assert _dev_counts() == (0, 1)
        # inside kernel invocation the fake device is not consulted: meta
        with in_kernel_invocation_manager(mode):
            assert t.device == torch.device("meta")
    finally:
        t.__dict__[attr] = saved


def test_non_bool_in_kernel_invocation_falls_back_to_stock(mode):
    with mode:
        t = torch.empty(2, device="cuda")
    fastfake.install()
    for flag, expected in ((1, "meta"), (0, "cuda:0"), ("", "cuda:0")):
        mode.in_kernel_invocation = flag
        try:
            fastfake.reset_stats()
            assert str(t.device) == expected
            assert _dev_counts() == (0, 1)
        finally:
            mode.in_kernel_invocation = False


class PlainSub(FakeTensor):
    pass


class FakeDeviceOverride(FakeTensor):
    """Subclass overriding fake_device (stock's device property reads self.fake_device)."""

    @property
    def fake_device(self):
        return torch.device("cpu")

    @fake_device.setter
    def fake_device(self, d):
        self._fake_device = d


def test_plain_subclass_matches_stock(mode):
    t = PlainSub(mode, torch.empty(2, device="meta"), torch.device("cuda"))
    stock = t.device
    assert stock == torch.device("cuda:0")
    fastfake.install()
    assert t.device == stock
    with in_kernel_invocation_manager(mode):
        assert t.device == torch.device("meta")


def test_subclass_overriding_fake_device_matches_stock(mode):
    t = FakeDeviceOverride(mode, torch.empty(2, device="meta"), torch.device("cuda"))
    stock = t.device
    assert stock == torch.device("cpu")
    fastfake.install()
    assert t.device == stock


def test_device_false_does_not_serve_device(mode, stock_device):
    with mode:
        t = torch.empty(2, device="cuda")
    fastfake.install(device=False)
    assert FakeTensor.__dict__["device"] is stock_device
    fastfake.reset_stats()
    assert t.device == torch.device("cuda:0")
    assert _dev_counts() == (0, 0)


def test_device_fast_counter_moves_per_read(mode):
    with mode:
        t = torch.empty(2)
    fastfake.install()
    fastfake.reset_stats()
    for _ in range(5):
        t.device
    assert _dev_counts() == (5, 0)
    fastfake.uninstall()
    fastfake.reset_stats()
    t.device
    assert _dev_counts() == (0, 0)
