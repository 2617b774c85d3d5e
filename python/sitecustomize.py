"""dtrun's hook into every Python worker: dtrun puts this directory on the workers' PYTHONPATH
(after any entry of the user's) when --hang_timeout is on, so that unmodified PyTorch scripts
report progress and print their stacks in a hang (see dtrun_torch_hook.py, dtrun_progress.py).

Only the worker process dtrun started reports: the first process to run this claims the
progress file (DTRUN_PROGRESS_PID); its children (DataLoader workers, subprocesses) inherit the
environment and leave the file alone. DTRUN_PYTHON_HOOK=0 turns it off. Afterwards the next
sitecustomize on sys.path (Debian's, a virtualenv's) runs as if this one were not there.
"""


def _report_progress():
    import os

    if os.environ.get("DTRUN_PYTHON_HOOK", "1") == "0" or not os.environ.get("DTRUN_PROGRESS_FILE"):
        return
    owner = os.environ.get("DTRUN_PROGRESS_PID")
    if owner and owner != str(os.getpid()):
        return
    os.environ["DTRUN_PROGRESS_PID"] = str(os.getpid())
    import dtrun_torch_hook

    dtrun_torch_hook.install()


def _chain():
    """Runs the sitecustomize this one shadows, under its own name, as site.py would."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = None
    for index, entry in enumerate(sys.path):
        if os.path.abspath(entry or os.getcwd()) == here:
            rest = sys.path[index + 1 :]
            break
    if rest is None:
        return
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _report_progress()
except Exception:  # noqa: BLE001 - never stop a worker from starting
    pass
_chain()
