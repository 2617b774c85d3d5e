"""Writes sys.orig_argv (the interpreter's command line, as the launcher built it) as JSON to
"$DTRUN_LOG_DIR/argv"."""
import json
import os
import sys

with open(os.path.join(os.environ["DTRUN_LOG_DIR"], "argv"), "w") as f:
    json.dump(sys.orig_argv, f)
