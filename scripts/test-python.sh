#!/usr/bin/env bash
# The Python client's own tests (clients/python): installs it with pytest into a virtual
# environment under .build, then runs its suite against real supervisors over the TestKit plugin
# of the current build. Run by scripts/test.sh after the Swift suite; arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bin=$(swift build --show-bin-path)
venv="$root/.build/python-venv"
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pytest>=7" "$root/clients/python"
export SUPERVISOR_BIN="$bin/supervisor"
export SANDBOXED_PLUGINS_TESTKIT="$bin/libTestKit.so"
cd "$root/clients/python"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
