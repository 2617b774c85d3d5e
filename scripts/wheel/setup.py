"""The dtrun wheel's setuptools build: scripts/build_wheel.sh copies this directory beside a
`cmake --install` prefix (prefix/) and runs `python3 -m build --wheel --no-isolation` here.

prefix/bin/* and prefix/share/** go in as data files, installed under the environment's own bin/
and share/ (so bin/dtrun finds bin/../share/dtrun/python); the package dtrun gives `python -m
dtrun`. The tag is py3-none-<platform>: any Python 3 runs the two small modules, and the platform
(manylinux_2_<N>_x86_64, N the binaries' glibc floor) comes from build_wheel.sh.
"""
import os
from pathlib import Path

from setuptools import setup
from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
PREFIX = HERE / "prefix"
PLATFORM = os.environ["DTRUN_WHEEL_PLATFORM"]
VERSION = os.environ["DTRUN_WHEEL_VERSION"]


class PlatformWheel(bdist_wheel):
    """Binaries inside, so not pure; but tied to no Python version or ABI."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        return "py3", "none", PLATFORM


def data_files():
    """(install directory, [files]) for bin/dtrun, bin/dtrun-netcheck and everything in share/."""
    groups = {}
    wanted = [PREFIX / "bin" / "dtrun", PREFIX / "bin" / "dtrun-netcheck"]
    wanted += sorted(p for p in (PREFIX / "share").rglob("*") if p.is_file())
    for path in wanted:
        rel = path.relative_to(PREFIX)
        groups.setdefault(str(rel.parent), []).append(str(path.relative_to(HERE)))
    return sorted(groups.items())


setup(
    name="dtrun",
    version=VERSION,
    description="torchrun-compatible launcher and elastic agent for multi-node training",
    long_description="dtrun starts and supervises the worker processes of a distributed training "
    "job, as PyTorch's torchrun does (same options, same worker environment), on one node or "
    "many. This wheel carries the dtrun binary (the `dtrun` command), dtrun-netcheck and the "
    "Python hook; `python -m dtrun` runs the same binary.",
    python_requires=">=3.8",
    packages=["dtrun"],
    data_files=data_files(),
    cmdclass={"bdist_wheel": PlatformWheel},
    zip_safe=False,
)
