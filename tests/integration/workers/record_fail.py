"""A torchrun-style script whose main is wrapped in torch's @record: rank 1 raises, so torch
writes the traceback to TORCHELASTIC_ERROR_FILE and the launcher's report must quote it."""
import os

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if int(os.environ["RANK"]) == 1:
        raise RuntimeError("boom on rank 1")


if __name__ == "__main__":
    main()
