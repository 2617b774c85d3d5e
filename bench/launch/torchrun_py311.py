#!/usr/bin/python3
"""Debian's torchrun (torch 1.13) with one fix, so that it runs on Python 3.11.

Usage: /usr/bin/python3 bench/launch/torchrun_py311.py [torchrun options] ENTRYPOINT [ARGS...]

/usr/bin/torchrun crashes before launching anything: torch 1.13's `Std.from_str` finds the enum
member for "0"/"3" by iterating the IntFlag `Std`, and since Python 3.11 iteration yields only the
canonical single-bit members (OUT, ERR), so NONE (0) and ALL (3) come back as None and
`Std.to_map` fails with "'NoneType' object has no attribute 'get'"
(docs: /work/shared/reference/torchrun.md §4, last paragraph). This wrapper replaces that one
function with `Std(int(v))` and then runs `torch.distributed.run.main()`, exactly what the
console script does. It changes no system file. Everything else is torch 1.13 unchanged.
"""
import re
import sys
from typing import Dict, Union

from torch.distributed.elastic.multiprocessing import api as _mp_api
from torch.distributed.elastic.multiprocessing.api import Std


def _from_str(cls, vm: str) -> Union[Std, Dict[int, Std]]:
    if re.match(_mp_api._VALUE_REGEX, vm):
        return cls(int(vm))
    if re.match(_mp_api._MAPPING_REGEX, vm):
        return {int(i): cls(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(
        f"{vm} does not match: <{_mp_api._VALUE_REGEX}> or <{_mp_api._MAPPING_REGEX}>"
    )


Std.from_str = classmethod(_from_str)

from torch.distributed.run import main  # noqa: E402  (after the patch, as the script would)

if __name__ == "__main__":
    sys.exit(main())
