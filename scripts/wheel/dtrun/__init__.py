"""dtrun as its wheel installs it: the binary in the environment's bin/ (the `dtrun` command),
the Python hook in share/dtrun/python beside it; binary_path() finds the binary."""
import os
import sysconfig


def binary_path():
    """The dtrun binary this wheel installed, or None when it is missing.

    The wheel's file list (RECORD) names it wherever pip put the data (a venv, --user, --prefix);
    the scheme's scripts directory is the fallback when the list is unavailable.
    """
    try:
        from importlib import metadata

        files = metadata.files("dtrun") or []
    except Exception:  # no metadata (a source checkout on sys.path): use the fallback
        files = []
    candidates = [f.locate() for f in files if f.name == "dtrun" and f.parent.name == "bin"]
    candidates.append(os.path.join(sysconfig.get_path("scripts"), "dtrun"))
    for path in candidates:
        path = os.path.realpath(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None
