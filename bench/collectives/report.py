#!/usr/bin/env python3
"""Turns collectives_bench / torch_collectives.py "result ..." lines into tables (stdout) and
gnuplot data files (one per implementation and rank count: busbw vs size). Each measurement is
the median over the run's repeats of each repeat's median. Standard library only.

  report.py RESULTS_FILE OUT_DIR [SWEEP_FILE [MEMCPY_FILE]]

MEMCPY_FILE holds memcpy_bw's lines ("memcpy bytes=N GBps=X", before and after the run): every
bandwidth is then also given as a fraction of their mean, this machine's one-core copy rate.
"""
import statistics
import sys
from collections import defaultdict

IMPLS = ("shm", "shm-1copy", "tcp", "gloo", "torch-gloo")
PEER = "torch-gloo"


def human(nbytes):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def load(path):
    """(op, bytes, n) -> impl -> {"us": median over repeats, "busbw":, "algbw":, "reps":}"""
    samples = defaultdict(lambda: defaultdict(list))
    for line in open(path, encoding="utf-8"):
        if not line.startswith("result "):
            continue
        f = dict(item.split("=", 1) for item in line.split()[1:])
        samples[(f["op"], int(f["bytes"]), int(f["n"]))][f["impl"]].append(f)
    rows = {}
    for key, impls in samples.items():
        rows[key] = {}
        for impl, runs in impls.items():
            rows[key][impl] = {
                "us": statistics.median(float(r["median_us"]) for r in runs),
                "algbw": statistics.median(float(r["algbw_GBps"]) for r in runs),
                "busbw": statistics.median(float(r["busbw_GBps"]) for r in runs),
                "reps": len(runs),
            }
    return rows


def main_table(rows):
    impls = [i for i in IMPLS if any(i in r for r in rows.values())]
    mine = [i for i in impls if i != PEER]
    order = {"all_reduce": 0, "barrier": 1, "sendrecv_lat": 2, "sendrecv_bw": 3}
    head = f"{'op':<13} {'size':>8} {'n':>2} |"
    for impl in impls:
        head += f" {impl + ' us':>14} {'GB/s':>7} |"
    for impl in mine:
        head += f" {impl + ' vs torch':>13}"
    print(head)
    print("-" * len(head))
    for key in sorted(rows, key=lambda k: (order.get(k[0], 9), k[2], k[1])):
        op, nbytes, n = key
        line = f"{op:<13} {human(nbytes) if nbytes else '-':>8} {n:>2} |"
        bw = op in ("all_reduce", "sendrecv_bw")
        for impl in impls:
            f = rows[key].get(impl)
            if f is None:
                line += f" {'n/a':>14} {'':>7} |"
                continue
            line += f" {f['us']:>14.1f} {f['busbw'] if bw else 0:>7.3f} |"
        torch = rows[key].get(PEER)
        for impl in mine:
            f = rows[key].get(impl)
            ratio = (f"{torch['us'] / f['us']:.2f}x" if f and torch and f["us"] > 0 else "n/a")
            line += f" {ratio:>13}"
        print(line)
    reps = max((f["reps"] for r in rows.values() for f in r.values()), default=0)
    print(f"(us: median time per op, slowest rank, median of {reps} repeats; GB/s: busbw = "
          "algbw x 2(n-1)/n for all_reduce, bytes/time for sendrecv_bw; 'X vs torch' = "
          "torch-gloo time / X time: busbw and bandwidth ratios, > 1 means X is faster; for "
          "latency, its inverse is X's latency as a fraction of torch-gloo's)")


def copy_fraction_table(rows, memcpy_file):
    """Each implementation's bandwidth (busbw; bytes/time for send/recv) at the sizes of 1 MiB and
    more, as a fraction of one core's memcpy rate measured in the same run."""
    rates = [float(dict(item.split("=", 1) for item in line.split()[1:])["GBps"])
             for line in open(memcpy_file, encoding="utf-8") if line.startswith("memcpy ")]
    if not rates:
        return
    copy = statistics.mean(rates)
    impls = [i for i in IMPLS if any(i in r for r in rows.values())]
    print()
    print(f"as a fraction of this machine's memory copy ({copy:.2f} GB/s: one core, 64 MiB, "
          f"mean of {len(rates)} measurements in this run)")
    head = f"{'op':<13} {'size':>8} {'n':>2} |" + "".join(f" {impl:>11}" for impl in impls)
    print(head)
    print("-" * len(head))
    for key in sorted(rows, key=lambda k: (k[0], k[2], k[1])):
        op, nbytes, n = key
        if op not in ("all_reduce", "sendrecv_bw") or nbytes < (1 << 20):
            continue
        line = f"{op:<13} {human(nbytes):>8} {n:>2} |"
        for impl in impls:
            f = rows[key].get(impl)
            line += f" {f['busbw'] / copy:>11.2f}" if f else f" {'n/a':>11}"
        print(line)


def sweep_row(transport, n, nbytes, times, algos):
    """One row of an algorithm sweep's table: each algorithm's median, the fastest starred."""
    best = min(times, key=times.get)
    line = f"{transport:<9} {n:>2} {human(nbytes):>8} |"
    for a in algos:
        t = times.get(a)
        line += f" {t:>10.1f}{'*' if a == best else ' '}" if t is not None else f" {'n/a':>11}"
    return line


def sweep_table(rows):
    # impl = "<transport>/<algo>"
    by = defaultdict(dict)  # (transport, n, bytes) -> algo -> us
    for (op, nbytes, n), impls in rows.items():
        if op != "all_reduce":
            continue
        for impl, f in impls.items():
            transport, algo = impl.split("/", 1)
            by[(transport, n, nbytes)][algo] = f["us"]
    if not by:
        return
    algos = ("doubling", "ring", "hier", "direct")
    print()
    print("all_reduce algorithm sweep (median us; * = fastest)")
    head = f"{'transport':<9} {'n':>2} {'size':>8} |" + "".join(f" {a:>11}" for a in algos)
    print(head)
    print("-" * len(head))
    crossover = {}
    for key in sorted(by):
        transport, n, nbytes = key
        times = by[key]
        line = sweep_row(transport, n, nbytes, times, algos)
        print(line)
        if "ring" in times and "doubling" in times and times["ring"] <= times["doubling"]:
            crossover.setdefault((transport, n), nbytes)
    for (transport, n), nbytes in sorted(crossover.items()):
        print(f"ring beats doubling from {human(nbytes)} ({transport}, {n} ranks)")
    # direct against the best of the others: the smallest size from which it is fastest at every
    # size measured above it.
    direct_from = {}
    for transport, n in sorted({(k[0], k[1]) for k in by}):
        sizes = sorted(b for (t, m, b) in by if (t, m) == (transport, n))
        since = None
        for nbytes in sizes:
            times = by[(transport, n, nbytes)]
            others = [t for a, t in times.items() if a != "direct"]
            if "direct" in times and others and times["direct"] <= min(others):
                since = nbytes if since is None else since
            else:
                since = None
        if since is not None:
            direct_from[(transport, n)] = since
    for (transport, n), nbytes in sorted(direct_from.items()):
        print(f"direct beats the others from {human(nbytes)} ({transport}, {n} ranks)")


def gather_sweep_table(rows):
    # all_gather under each algorithm: impl = "<transport>/<algo>", bytes = the output's size
    by = defaultdict(dict)  # (transport, n, bytes) -> algo -> us
    for (op, nbytes, n), impls in rows.items():
        if op == "all_gather":
            for impl, f in impls.items():
                transport, algo = impl.split("/", 1)
                by[(transport, n, nbytes)][algo] = f["us"]
    if not by:
        return
    algos = ("doubling", "ring")
    print()
    print("all_gather algorithm sweep (median us; * = fastest; size = the output's)")
    head = f"{'transport':<9} {'n':>2} {'size':>8} |" + "".join(f" {a:>11}" for a in algos) + "  ring/doubling"
    print(head)
    print("-" * len(head))
    ring_from = {}
    for key in sorted(by):
        transport, n, nbytes = key
        times = by[key]
        line = sweep_row(transport, n, nbytes, times, algos)
        if times.get("doubling"):
            line += f"  {times.get('ring', 0) / times['doubling']:>6.2f}"
        print(line)
        # the smallest size from which the ring is as fast at every size measured above it
        if "ring" in times and "doubling" in times and times["ring"] <= times["doubling"]:
            ring_from.setdefault((transport, n), nbytes)
        else:
            ring_from.pop((transport, n), None)
    for (transport, n), nbytes in sorted(ring_from.items()):
        print(f"all_gather: ring beats doubling from {human(nbytes)} on ({transport}, {n} ranks)")


def main():
    results_file, out_dir = sys.argv[1], sys.argv[2]
    rows = load(results_file)
    main_table(rows)
    if len(sys.argv) > 4:
        copy_fraction_table(rows, sys.argv[4])
    if len(sys.argv) > 3:
        sweep = load(sys.argv[3])
        if sweep:
            sweep_table(sweep)
            gather_sweep_table(sweep)

    series = defaultdict(list)
    for (op, nbytes, n), impls in rows.items():
        if op == "all_reduce":
            for impl, f in impls.items():
                series[(impl, n)].append((nbytes, f["busbw"]))
    for (impl, n), points in series.items():
        with open(f"{out_dir}/busbw_{impl}_{n}.dat", "w", encoding="utf-8") as out:
            for nbytes, busbw in sorted(points):
                out.write(f"{nbytes} {busbw}\n")


if __name__ == "__main__":
    main()
