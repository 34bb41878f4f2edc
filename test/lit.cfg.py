# lit configuration for ember: `lit -v test/` runs every .mlir / .py / .test file under test/
# except the pytest suites. RUN lines use ember-opt, FileCheck (the Python `filecheck`
# package), %PYTHON and `not` (a builtin of lit's internal shell).
import os
import re
import shutil
import sys

import lit.formats

config.name = "ember"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "pytest", "fuzz", "Inputs", "__pycache__"]
config.test_source_root = os.path.dirname(__file__)

# The same interpreter that runs lit runs the tests, so ember and filecheck come from one
# environment; the rest of the environment (PYTHONPATH, TRITON_*, ...) passes through.
config.environment.update(os.environ)
bindir = os.path.dirname(sys.executable)


def _tool(name):
    """`name` from this interpreter's environment first, then from PATH."""
    local = os.path.join(bindir, name)
    if os.access(local, os.X_OK):
        return local
    return shutil.which(name)


python = sys.executable
ember_opt = _tool("ember-opt") or f"{python} -m ember.passes.ember_opt"
filecheck = _tool("filecheck")
if filecheck is None:
    lit_config.fatal("the `filecheck` command is missing: pip install filecheck")

# Word-bounded so that a path like test/tools/ember-opt-errors.mlir is left alone.
_tool_word = r"(?<![\w/.-]){}(?![\w.-])"
config.substitutions.append(("%PYTHON", python))
config.substitutions.append((_tool_word.format(re.escape("ember-opt")), ember_opt))
config.substitutions.append((_tool_word.format("FileCheck"), filecheck))
