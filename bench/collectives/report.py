#!/usr/bin/env python3
"""Turns collectives_bench / torch_collectives.py "result ..." lines into one table (stdout) and
gnuplot data files (one per implementation and rank count: busbw vs size). Standard library only.

  report.py RESULTS_FILE OUT_DIR
"""
import sys
from collections import defaultdict

IMPLS = ("tcp", "gloo", "torch-gloo")


def human(nbytes):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def main():
    results_file, out_dir = sys.argv[1], sys.argv[2]
    rows = {}  # (op, bytes, n) -> impl -> fields
    for line in open(results_file, encoding="utf-8"):
        if not line.startswith("result "):
            continue
        fields = dict(item.split("=", 1) for item in line.split()[1:])
        key = (fields["op"], int(fields["bytes"]), int(fields["n"]))
        rows.setdefault(key, {})[fields["impl"]] = fields

    order = {"all_reduce": 0, "barrier": 1, "sendrecv_lat": 2, "sendrecv_bw": 3}
    head = f"{'op':<13} {'size':>8} {'n':>2} |"
    for impl in IMPLS:
        head += f" {impl + ' us':>14} {'algbw':>7} {'busbw':>7} |"
    head += f" {'torch/tcp time':>14}"
    print(head)
    print("-" * len(head))
    for key in sorted(rows, key=lambda k: (order.get(k[0], 9), k[2], k[1])):
        op, nbytes, n = key
        line = f"{op:<13} {human(nbytes) if nbytes else '-':>8} {n:>2} |"
        for impl in IMPLS:
            f = rows[key].get(impl)
            if f is None:
                line += f" {'n/a':>14} {'':>7} {'':>7} |"
                continue
            bw = op in ("all_reduce", "sendrecv_bw")
            line += (f" {float(f['median_us']):>14.1f} "
                     f"{float(f['algbw_GBps']) if bw else 0:>7.3f} "
                     f"{float(f['busbw_GBps']) if bw else 0:>7.3f} |")
        tcp, torch = rows[key].get("tcp"), rows[key].get("torch-gloo")
        ratio = (f"{float(torch['median_us']) / float(tcp['median_us']):.2f}x"
                 if tcp and torch and float(tcp["median_us"]) > 0 else "n/a")
        print(line + f" {ratio:>14}")
    print("(us: median time per op, slowest rank; algbw/busbw in GB/s; busbw = algbw x 2(n-1)/n "
          "for all_reduce; torch/tcp > 1 means tcp is faster)")

    series = defaultdict(list)
    for (op, nbytes, n), impls in rows.items():
        if op == "all_reduce":
            for impl, f in impls.items():
                series[(impl, n)].append((nbytes, float(f["busbw_GBps"])))
    for (impl, n), points in series.items():
        with open(f"{out_dir}/busbw_{impl}_{n}.dat", "w", encoding="utf-8") as out:
            for nbytes, busbw in sorted(points):
                out.write(f"{nbytes} {busbw}\n")


if __name__ == "__main__":
    main()
