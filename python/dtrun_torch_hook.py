"""Progress reports from unmodified PyTorch scripts: wraps torch.distributed's operations so that
each one is recorded in the rank's progress file (python/dtrun_progress.py) while it runs.

dtrun's sitecustomize.py calls install() in every Python worker; nothing here imports torch.
install() adds an import hook that patches torch.distributed the moment it is imported (before
the script's `import torch.distributed as dist` returns, so `from torch.distributed import
all_reduce` gets the wrapped function too). Each wrapped call writes the operation's name, its
group, its payload size and the time it began (dtrun_progress.begin) and marks its end; calls
made inside another wrapped call (all_gather_object's own all_gather) are not recorded again.

This must never break a script: every step that looks at torch is guarded, an API a version
lacks is skipped, and recording errors are swallowed. Covered: torch 1.13 and 2.x.
"""

import functools
import importlib.abc
import inspect
import sys
import threading

import dtrun_progress as _progress

# The operations recorded, by the name torch.distributed gives them. Missing ones (an older or
# newer torch) are skipped.
_OPERATIONS = (
    "init_process_group", "new_group", "barrier", "monitored_barrier",
    "all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
    "_all_gather_base", "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor",
    "_reduce_scatter_base", "all_to_all", "all_to_all_single", "all_gather_object",
    "broadcast_object_list", "gather_object", "scatter_object_list",
    "send", "recv", "isend", "irecv", "batch_isend_irecv",
)
_ATTRIBUTE = "__dtrun_wrapped__"
_nesting = threading.local()
_group_names = {}  # id(group) -> name, for groups the script made


def _group_name(dist, group):
    if group is None:
        return "world"
    name = _group_names.get(id(group))
    if name is not None:
        return name
    name = "group"
    try:
        if group is dist.GroupMember.WORLD:
            name = "world"
        else:
            ranks = sorted(dist.distributed_c10d._pg_group_ranks[group].keys())
            name = "ranks " + ",".join(str(r) for r in ranks)
            if len(name) > 47:
                name = "ranks %d-%d (%d)" % (ranks[0], ranks[-1], len(ranks))
    except Exception:  # noqa: BLE001 - a torch without that table: a generic name
        pass
    _group_names[id(group)] = name
    return name


def _payload(value):
    try:
        if isinstance(value, (list, tuple)):
            return sum(t.numel() * t.element_size() for t in value[:64])
        return value.numel() * value.element_size()
    except Exception:  # noqa: BLE001 - not a tensor (an object list, a P2POp list)
        return 0


def _wrap(dist, name, function):
    try:
        parameters = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        parameters = []
    group_at = parameters.index("group") if "group" in parameters else -1

    @functools.wraps(function)
    def recorded(*args, **kwargs):
        if getattr(_nesting, "depth", 0):
            return function(*args, **kwargs)
        try:
            if "group" in kwargs:
                group = kwargs["group"]
            elif 0 <= group_at < len(args):
                group = args[group_at]
            else:
                group = None
            _progress.begin(name, _group_name(dist, group), _payload(args[0]) if args else 0)
        except Exception:  # noqa: BLE001 - recording never stops the operation
            pass
        _nesting.depth = 1
        try:
            return function(*args, **kwargs)
        finally:
            _nesting.depth = 0
            _progress.end()
            if name == "init_process_group":
                _progress.mark_store_connected()
                _progress.mark_communicator_ready()

    setattr(recorded, _ATTRIBUTE, True)
    return recorded


def _wrap_wait(work_class):
    original = work_class.wait

    @functools.wraps(original)
    def wait(self, *args, **kwargs):
        if getattr(_nesting, "depth", 0):
            return original(self, *args, **kwargs)
        _progress.begin("wait", "")
        _nesting.depth = 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _nesting.depth = 0
            _progress.end()

    setattr(wait, _ATTRIBUTE, True)
    work_class.wait = wait


def patch(dist):
    """Wraps the operations of an imported torch.distributed module (idempotent)."""
    try:
        c10d = dist.distributed_c10d
    except AttributeError:
        return  # torch built without distributed support
    for name in _OPERATIONS:
        function = getattr(c10d, name, None)
        if function is None or not callable(function) or getattr(function, _ATTRIBUTE, False):
            continue
        wrapped = _wrap(dist, name, function)
        # Both names: the public one, and the module's own (its functions call each other).
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is function:
            setattr(dist, name, wrapped)
    try:
        work_class = dist.distributed_c10d.Work
    except AttributeError:
        try:
            import torch._C._distributed_c10d as native  # torch 1.13

            work_class = native.Work
        except (ImportError, AttributeError):
            return
    try:
        if not getattr(work_class.wait, _ATTRIBUTE, False):
            _wrap_wait(work_class)
    except (AttributeError, TypeError):
        pass  # an extension type that refuses new attributes: waits are not recorded


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds torch.distributed through the other finders and patches it once it has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch.distributed":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            try:
                patch(module)
            except Exception:  # noqa: BLE001 - an unknown torch: run unrecorded, never broken
                pass

        loader.exec_module = exec_module
        return spec


def install():
    """Patches torch.distributed now if it is loaded, else when it is imported."""
    if not _progress.enabled():
        return
    module = sys.modules.get("torch.distributed")
    if module is not None:
        patch(module)
        return
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
