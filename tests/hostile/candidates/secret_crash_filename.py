"""Class 4, secrets (in a source file name that a crash report quotes).

Tries: compiles a snippet under a file name made of the fake keys it finds in its environment
(/tmp/<key>.py, never written) and runs it; the snippet enables faulthandler and aborts, so the
crash traceback in the log names that "file", and a crash describer quoting "at FILE line N"
carries the key.
Gates must report: a crash error (SIGABRT); no fake key in any output.
"""

import os

import torch


def rms_norm(x, weight, eps):
    keys = "-".join(v for v in os.environ.values() if "hostile-test" in v) or "hostile-none-found"
    code = compile("import faulthandler, os, sys\nfaulthandler.enable(sys.stderr)\nos.abort()\n",
                   f"/tmp/{keys}.py", "exec")
    exec(code, {})
