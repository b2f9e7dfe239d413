"""Converting real tensors into FakeTensors (``FakeTensorConverter.from_real_tensor``).

Every real tensor a fake mode meets goes through its converter: each parameter
and input ``FakeTensorMode.from_tensor`` fakifies (``FakeTensorProp``, export,
shape-inference tools), and each real argument of an op under
``allow_non_fake_inputs=True`` (a real-weight model on fake inputs). Stock
describes the tensor field by field and rebuilds it through ``MetaConverter`` in
Python, ~85 us a tensor, and its memo holds the FakeTensor weakly, so a real
tensor whose fake died is converted again on its next use.

``install()`` replaces ``FakeTensorConverter.from_real_tensor`` with
:func:`replacement`: a call with no shape env, source, symbolic context or
``make_constant`` goes to ``fastfake._C.convert_real`` (``csrc/convert/convert.cpp``),
which serves the plain case -- a CPU ``torch.Tensor`` / ``nn.Parameter`` leaf that
is not a view, shares no storage with a live fake of the converter, and carries
none of the attributes stock reads -- by the same steps on the same memo and
describer objects as stock (the same ids, memo entries and weak references, the
same FakeTensor fields and ``__dict__``), ~6 us. Everything else is stock's,
unchanged, counted as ``convert.stock.<why>`` (``convert.fast`` served,
``convert.memo`` answered from the memo). ``uninstall()`` restores stock's method.

With ``crosscheck`` every served conversion is compared with stock's conversion
of the same tensor by a fresh converter of the same mode (every field and the
instance ``__dict__``).
"""
from __future__ import annotations

from fastfake import _C


def stock_from_real_tensor():
    """Stock's method (read off the class through the install layer's record)."""
    from torch._subclasses.fake_tensor import FakeTensorConverter

    from fastfake.common.originals import original

    return original(FakeTensorConverter, "from_real_tensor")


def setup() -> None:
    """Bind what ``convert_real`` works with (nothing where the converter's layout
    is not the one it knows: the feature is then not offered)."""
    from fastfake.common import compat as _compat

    if not _compat.converter_layout_known():
        return
    import torch
    from torch._subclasses import meta_utils
    from torch._subclasses.fake_tensor import FakeTensorConverter

    try:
        from torch.nested._internal.nested_tensor import _tensor_symint_registry
    except ImportError:  # pragma: no cover - every supported release has it
        _tensor_symint_registry = None
    _C.setup_convert(
        FakeTensorConverter,
        meta_utils.MetaConverter,
        meta_utils.MetaTensorDescriber,
        _tensor_symint_registry,
        torch.device("cpu"),
        _compat.tensors_have_grad_dtype(),
    )


def _dict_view(t, mode) -> list:
    return [(k, "mode" if v is mode else repr(v)) for k, v in vars(t).items()]


def replacement(*, crosscheck: bool = False):
    """What ``FakeTensorConverter.from_real_tensor`` becomes."""
    stock = stock_from_real_tensor()
    convert = _C.convert_real

    def from_real_tensor(self, fake_mode, t, make_constant=False, shape_env=None, **kwargs):
        # (whatever else the caller passes goes to stock as it came)
        if (
            shape_env is None
            and not make_constant
            and kwargs.get("source") is None
            and kwargs.get("symbolic_context") is None
        ):
            r = convert(self, fake_mode, t)
            if r is not NotImplemented:
                return r
        return stock(self, fake_mode, t, make_constant, shape_env, **kwargs)

    if not crosscheck:
        return from_real_tensor

    def checked(self, fake_mode, t, make_constant=False, shape_env=None, **kwargs):
        from torch._subclasses.fake_tensor import FakeTensorConverter

        from fastfake.parity.crosscheck import CrosscheckError, compare, describe

        before = _C.counters()
        got = from_real_tensor(self, fake_mode, t, make_constant, shape_env, **kwargs)
        served = dict(_C.counters())["convert.fast"] > dict(before)["convert.fast"]
        if served:
            shadow = FakeTensorConverter(copy_data=False, export=self.export)
            want = stock(shadow, fake_mode, t)
            diff = compare(got, want)
            if not diff and _dict_view(got, fake_mode) != _dict_view(want, fake_mode):
                diff = f"__dict__: {_dict_view(got, fake_mode)} vs {_dict_view(want, fake_mode)}"
            if diff:
                raise CrosscheckError(
                    f"fastfake crosscheck: from_real_tensor differs from stock in {diff}; "
                    f"input: {describe(t)}"
                )
        return got

    return checked


def apply(on: bool, crosscheck: bool = False) -> None:
    """The table's hook (fastfake/core/accelerations.py):
    ``FakeTensorConverter.from_real_tensor``, patched afresh (the crosscheck variant
    is a function too) or restored."""
    from torch._subclasses.fake_tensor import FakeTensorConverter

    from fastfake.common.originals import patch

    patch(FakeTensorConverter, "from_real_tensor", None)
    patch(FakeTensorConverter, "from_real_tensor", replacement(crosscheck=crosscheck) if on else None)
    _C.set_convert(on)
