"""The client's own tests: real supervisors (``$SUPERVISOR_BIN``) over bundles of the project's
TestKit plugin (``$SANDBOXED_PLUGINS_TESTKIT``, the path of libTestKit.so); scripts/test-python.sh
sets both."""
import json
import os
import shutil

import pytest

TESTKIT = os.environ.get("SANDBOXED_PLUGINS_TESTKIT")


@pytest.fixture
def bundles(tmp_path):
    """``bundles(identifier, permissions=(), dependencies=())`` adds a TestKit bundle to a plugin
    folder of the test's own, and returns that folder."""
    if not TESTKIT or not os.path.exists(TESTKIT):
        pytest.skip("no TestKit library: set $SANDBOXED_PLUGINS_TESTKIT (scripts/test-python.sh does)")
    root = tmp_path / "plugins"
    root.mkdir()

    def add(identifier, permissions=(), dependencies=()):
        folder = root / identifier
        folder.mkdir()
        library = folder / os.path.basename(TESTKIT)
        try:
            os.link(TESTKIT, library)
        except OSError:
            shutil.copy(TESTKIT, library)
        manifest = {"identifier": identifier, "version": "1.0.0", "library": library.name}
        if permissions:
            manifest["permissions"] = list(permissions)
        if dependencies:
            manifest["dependencies"] = list(dependencies)
        (folder / "plugin.json").write_text(json.dumps(manifest))
        return str(root)

    return add
