# The Debian packages: `cpack -G DEB` in a build tree (or `ninja package`) makes one package per
# install component: dtrun_<version>_<arch>.deb from the launcher's rules (bin/dtrun,
# share/dtrun/python, the docs) and libdtrt-dev_<version>_<arch>.deb from libdtrt's
# (cmake/DtrunLibdtrt.cmake: the library, its headers, the CMake package, dtrt.pc).
# dtrun's Depends line comes from dpkg-shlibdeps over the installed binary (libc6 alone: the release
# binaries link the rest in, cmake/DtrunPortable.cmake), so it names the Debian packages
# dtrun really links; it needs dpkg-dev and file (scripts/setup.sh).
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "dtrun")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "dtrun")
set(CPACK_PACKAGE_CONTACT "dtrun maintainers <dtrun@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "torchrun-compatible launcher and elastic agent for multi-node training")
set(CPACK_PACKAGE_DESCRIPTION
    "dtrun starts and supervises the worker processes of a distributed training job, as\n\
PyTorch's torchrun does (same options, same worker environment), on one node or many:\n\
static and c10d rendezvous, restarts, dead-node detection, SLURM, PBS, LSF, Flux and\n\
mpirun detection, hang diagnosis and run reports.")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME "DEB-DEFAULT")  # dtrun_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION "utils")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The Python hook runs in Python workers; stack dumps of hung workers use eu-stack, else gdb.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "elfutils | gdb, openmpi-bin")

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL dtrun libdtrt-dev)
set(CPACK_DEBIAN_DTRUN_PACKAGE_NAME "dtrun")
# In a component's package CPack prepends CPACK_PACKAGE_DESCRIPTION_SUMMARY to the component's
# description; dtrun's is the text above, as before components.
set(CPACK_DEBIAN_DTRUN_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION}")

# libdtrt-dev holds the shared library itself too (no separate libdtrt0): it is the one package
# a C++ program built against libdtrt needs. Its Depends come from dpkg-shlibdeps over
# libdtrt.so (Gloo, spdlog, OpenSSL, ...); programs built on it run under dtrun, hence Recommends.
set(CPACK_DEBIAN_LIBDTRT-DEV_PACKAGE_NAME "libdtrt-dev")
set(CPACK_DEBIAN_LIBDTRT-DEV_PACKAGE_SECTION "libdevel")
set(CPACK_DEBIAN_LIBDTRT-DEV_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_LIBDTRT-DEV_PACKAGE_RECOMMENDS "dtrun (= ${PROJECT_VERSION}), pkg-config")
set(CPACK_DEBIAN_LIBDTRT-DEV_PACKAGE_SUGGESTS "libtorch-dev")
# CPack 3.25 puts CPACK_PACKAGE_DESCRIPTION_SUMMARY (dtrun's) first in every component's
# description, so this text says which part of dtrun the package holds.
set(CPACK_DEBIAN_LIBDTRT-DEV_DESCRIPTION "This package: libdtrt, the C++ library of dtrun's workers.\n\
libdtrt joins a job started by dtrun or torchrun (init from the worker's environment) and\n\
offers a ProcessGroup: barrier, point-to-point and collectives over its own TCP and\n\
shared-memory backend, Gloo, or NCCL where built. dtrun::ddp adds DistributedDataParallel\n\
for libtorch. Use it with find_package(dtrun CONFIG) or pkg-config dtrt.")
include(CPack)
