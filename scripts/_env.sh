# Sourced by scripts/test and scripts/bench: create or reuse the project-local virtual
# environment, install the pinned dependencies, and build the C++ extension in place
# against the installed torch (no build isolation, so no second torch is ever fetched).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FASTFAKE_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  echo "[fastfake] creating virtual environment at $VENV" >&2
  python3 -m venv "$VENV"
fi
stamp="$VENV/.fastfake-reqs"
want="$(cat "$ROOT/requirements.txt" ${FASTFAKE_EXTRA_REQS:-} | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[fastfake] installing pinned dependencies" >&2
  "$PY" -m pip install -q --disable-pip-version-check -r "$ROOT/requirements.txt" ${FASTFAKE_EXTRA_REQS:+-r $FASTFAKE_EXTRA_REQS}
  # Refuse to continue with anything but the pinned CPU torch.
  "$PY" - <<'PYEOF'
import sys, torch
if torch.__version__.split("+")[0] != "2.13.0" or torch.version.cuda is not None:
    sys.exit(f"[fastfake] expected torch 2.13.0 CPU build, got {torch.__version__} (cuda={torch.version.cuda})")
PYEOF
  echo "$want" > "$stamp"
fi
echo "[fastfake] building extension (incremental)" >&2
( cd "$ROOT" && MAX_JOBS="${MAX_JOBS:-2}" "$PY" setup.py -q build_ext --inplace >/dev/null )
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
