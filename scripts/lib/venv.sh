# Sourced by scripts/demo and scripts/test: make sure .venv exists and holds this checkout with its test extras.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
  echo "attribution needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.attribution-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e '.[test]'
  echo "$want" > "$stamp"
fi
