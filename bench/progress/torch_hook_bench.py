"""What dtrun's Python hook (python/dtrun_torch_hook.py) adds to each torch.distributed call.

Run under dtrun with 2 ranks (bench/progress/run_torch_hook.sh): both ranks alternate blocks of
a small gloo all_reduce through torch's own function and through the hooked one (the same
process, the same run, so the machine's noise hits both alike), and rank 0 prints the medians
and the hook's cost per call; then the hook alone, around a function that does nothing.
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
import dtrun_progress  # noqa: E402
import dtrun_torch_hook  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

BLOCK = int(os.environ.get("BLOCK", "2000"))
REPEATS = int(os.environ.get("REPEATS", "7"))


def per_call(function, *args):
    start = time.perf_counter_ns()
    for _ in range(BLOCK):
        function(*args)
    return (time.perf_counter_ns() - start) / BLOCK


def main():
    if not dtrun_progress.enabled():
        sys.exit("run it under dtrun (it needs the rank's progress file): see run_torch_hook.sh")
    dist.init_process_group("gloo")
    plain = dist.all_reduce
    dtrun_torch_hook.patch(dist)
    hooked = dist.all_reduce
    assert hooked is not plain
    tensor = torch.ones(4)
    per_call(plain, tensor)  # warm-up
    times = {"plain": [], "hooked": []}
    for _ in range(REPEATS):
        dist.barrier()
        times["plain"].append(per_call(plain, tensor))
        dist.barrier()
        times["hooked"].append(per_call(hooked, tensor))

    def nothing(_tensor, group=None):
        return None

    wrapped = dtrun_torch_hook._wrap(dist, "all_reduce", nothing)  # noqa: SLF001
    alone = [per_call(wrapped, tensor) - per_call(nothing, tensor) for _ in range(REPEATS)]
    if dist.get_rank() == 0:
        p, h = statistics.median(times["plain"]), statistics.median(times["hooked"])
        print(f"all_reduce of 4 floats, 2 ranks, gloo: {p / 1000:.1f} us plain, {h / 1000:.1f} us "
              f"hooked (medians of {REPEATS} blocks of {BLOCK}): +{(h - p) / 1000:.2f} us, "
              f"{100 * (h - p) / p:+.1f}%")
        print(f"the hook alone (begin + end + group and size lookup): "
              f"{statistics.median(alone) / 1000:.2f} us per call "
              f"[{' '.join(f'{a / 1000:.2f}' for a in sorted(alone))}]")
        print(f"hooked / plain (the peer, same processes, same run): {h / p:.3f}x")
        data = os.environ.get("HOOK_BENCH_DATA")
        if data:  # per-block times for run_torch_hook.sh's plot: "block plain_us hooked_us"
            with open(data, "w") as f:
                for i, (a, b) in enumerate(zip(times["plain"], times["hooked"])):
                    f.write(f"{i + 1} {a / 1000:.3f} {b / 1000:.3f}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
