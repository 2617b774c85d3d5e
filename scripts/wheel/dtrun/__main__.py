"""`python -m dtrun ARGS`: the same as `dtrun ARGS`. The binary replaces this process (exec), so
signals reach dtrun itself and its exit status is the command's."""
import os
import sys

from dtrun import binary_path


def main():
    path = binary_path()
    if path is None:
        sys.exit("dtrun: the dtrun binary of this installation is missing from its bin/: "
                 "reinstall the wheel (pip install --force-reinstall dtrun-*.whl)")
    os.execv(path, [path, *sys.argv[1:]])


if __name__ == "__main__":
    main()
