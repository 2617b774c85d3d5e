# The Debian package: `cpack -G DEB` in a build tree (or `ninja package`) makes
# dtrun_<version>_<arch>.deb from the install rules (bin/dtrun, share/dtrun/python, the docs).
# Its Depends line comes from dpkg-shlibdeps over the installed binary (libc6 alone: the release
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
include(CPack)
