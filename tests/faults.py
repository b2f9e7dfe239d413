"""Fault tests in a fresh process: the install-time self-test runs once per
process, so a fault injected before ``install()`` is judged there."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def in_subprocess(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (``env``: variables to set there)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )


def fault_turns_off_only(inject: str, feature: str, *, keep: str, still_on: str) -> str:
    """Install in a fresh process after the statement ``inject`` (a fault): the
    self-test must turn ``feature`` off (warned, counted) and keep ``keep`` on, and
    the expression ``still_on`` (evaluated after install: whether the feature is in
    place) must be False. Returns the process's output."""
    r = in_subprocess(
        f"""
        import warnings
        import fastfake
        {inject}
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            fastfake.install()
        r = fastfake.selftest_report()
        print("passed:", r["passed"])
        for x in w:
            print("warned:", x.message)
        print("counted:", fastfake.stats()["selftest.failed.{feature}"])
        print("on:", {still_on})
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert f"'{feature}': False" in out and f"'{keep}': True" in out, out
    assert f"'{feature}', which stays off" in out, out
    assert "counted: 1" in out and "on: False" in out, out
    return out


def unknown_source_stays_stock(table: str, feature: str, *, still_on: str) -> None:
    """Install in a fresh process after emptying ``fastfake.common.compat.<table>`` (the
    stock-source digests a feature was proven on: as on a release or a patched torch
    fastfake does not know): the self-test must not run ``feature`` and
    ``still_on`` (whether the feature is in place) must be False."""
    r = in_subprocess(
        f"""
        import fastfake
        from fastfake.common import compat as _compat
        _compat.{table}.clear()
        fastfake.install()
        print("feature:", "{feature}" in fastfake.selftest_report()["passed"])
        print("on:", {still_on})
        """
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "feature: False" in r.stdout and "on: False" in r.stdout, r.stdout


def switched_off(feature: str, state: str) -> str:
    """Install in a fresh process with ``FASTFAKE_DISABLE=<feature>``: ``install()``
    says the feature is switched off; returns what the expression ``state`` (the
    feature's state after install) printed."""
    r = in_subprocess(
        f"""
        import fastfake
        from fastfake import _C
        fastfake.install()
        print("state:", {state})
        print("why:", fastfake.core.install.explain()["{feature}"])
        """,
        FASTFAKE_DISABLE=feature,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"why: switched off (FASTFAKE_DISABLE={feature})" in r.stdout, r.stdout
    return r.stdout.split("state: ", 1)[1].split("\n", 1)[0]


def switches_restore_stock(owner: type, name: str, stock: object, env_var: str) -> None:
    """``owner.<name>`` is fastfake's after ``install()``, and the identical ``stock``
    object after ``uninstall()``, with ``env_var`` set, and when neither elementwise
    nor cache is asked for (run in a test whose fixture leaves fastfake uninstalled)."""
    import os

    import fastfake

    fastfake.install()
    assert vars(owner)[name] is not stock
    fastfake.uninstall()
    assert vars(owner)[name] is stock
    os.environ[env_var] = "1"
    try:
        fastfake.install()
        assert vars(owner)[name] is stock
        fastfake.uninstall()
    finally:
        del os.environ[env_var]
    fastfake.install(elementwise=False, cache=False)
    assert vars(owner)[name] is stock
    fastfake.uninstall()
