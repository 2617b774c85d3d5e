#!/usr/bin/env python3
"""Writes the recorded machines the placement tests read, in sysfs's own layout (the files
readTopology() and torch's NUMA binding read). Rerun after changing a machine here:
    python3 tests/placement/topologies/record.py
Each machine is a real layout in miniature:
  amd-2s8g     2 sockets, NPS2 (4 NUMA nodes of 8 cores), SMT (cpu N+32 is cpu N's sibling), an L3
               per 4 cores (a core complex), 8 NVIDIA GPUs 2 per node, an NVSwitch bridge and a
               Mellanox NIC that are not GPUs; cgroups: v2 job42 (node 1's CPUs only) and v1
               slurm/job7 (cpus 0-3,32-35).
  intel-1s4g   1 socket, 1 NUMA node, 8 cores with adjacent SMT siblings, one L3, 4 GPUs whose
               numa_node is -1 (no affinity reported).
  cpu-2s       2 sockets of 4 cores without SMT, a NUMA node each, no GPU.
  no-numa      4 CPUs, 1 GPU and no devices/system/node (a kernel without NUMA).
  pair-2n2g    CPUs 0 and 1 on NUMA nodes 0 and 1, a GPU on each: the integration tests run real
               workers against it on any machine whose process may use CPUs 0 and 1.
  far-1n1g     CPUs 200-203 on one node and a GPU: binding there fails on a smaller machine.
"""
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


def ranges(ids):
    ids = sorted(ids)
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def machine(name, cpus, gpus, numa=True, others=(), cgroups=()):
    """cpus: {id: (socket, node, core_cpus, l3_cpus)}; gpus/others: (pci, vendor, class, node)."""
    root = os.path.join(HERE, name)
    shutil.rmtree(root, ignore_errors=True)
    write(root, "devices/system/cpu/online", ranges(cpus))
    nodes = {}
    for cpu, (socket, node, core, l3) in cpus.items():
        base = f"devices/system/cpu/cpu{cpu}"
        write(root, f"{base}/topology/physical_package_id", str(socket))
        write(root, f"{base}/topology/core_id", str(min(core)))
        write(root, f"{base}/topology/thread_siblings_list", ranges(core))
        for index, (level, kind, shared) in enumerate(
                [(1, "Instruction", core), (2, "Unified", core), (3, "Unified", l3)]):
            write(root, f"{base}/cache/index{index}/level", str(level))
            write(root, f"{base}/cache/index{index}/type", kind)
            write(root, f"{base}/cache/index{index}/shared_cpu_list", ranges(shared))
        nodes.setdefault(node, []).append(cpu)
    if numa:
        for node, members in nodes.items():
            write(root, f"devices/system/node/node{node}/cpulist", ranges(members))
        write(root, "devices/system/node/online", ranges(nodes))
    for pci, vendor, cls, node in list(gpus) + list(others):
        write(root, f"bus/pci/devices/{pci}/vendor", vendor)
        write(root, f"bus/pci/devices/{pci}/class", cls)
        write(root, f"bus/pci/devices/{pci}/numa_node", str(node))
    for rel, text in cgroups:
        write(root, f"fs/cgroup/{rel}", text)


def amd():
    cpus = {}
    for core in range(32):
        siblings = [core, core + 32]
        l3 = [c for c in range(core // 4 * 4, core // 4 * 4 + 4)]
        l3 += [c + 32 for c in l3]
        for cpu in siblings:
            cpus[cpu] = (core // 16, core // 8, siblings, l3)
    buses = ["07", "0f", "47", "4e", "87", "90", "b7", "bd"]
    gpus = [(f"0000:{bus}:00.0", "0x10de", "0x030200", i // 2) for i, bus in enumerate(buses)]
    others = [("0000:0a:00.0", "0x10de", "0x068000", 0),   # NVSwitch: a bridge, not a GPU
              ("0000:0c:00.0", "0x15b3", "0x020700", 0)]   # Mellanox InfiniBand NIC
    cgroups = [("job42/cpuset.cpus.effective", "8-15,40-47"),
               ("cpuset/slurm/job7/cpuset.effective_cpus", "0-3,32-35")]
    machine("amd-2s8g", cpus, gpus, others=others, cgroups=cgroups)


def intel():
    cpus = {}
    for core in range(8):
        siblings = [2 * core, 2 * core + 1]
        for cpu in siblings:
            cpus[cpu] = (0, 0, siblings, list(range(16)))
    gpus = [(f"0000:{bus}:00.0", "0x10de", "0x030000", -1) for bus in ["01", "21", "41", "61"]]
    machine("intel-1s4g", cpus, gpus)


def cpu_only():
    cpus = {cpu: (cpu // 4, cpu // 4, [cpu], list(range(cpu // 4 * 4, cpu // 4 * 4 + 4)))
            for cpu in range(8)}
    machine("cpu-2s", cpus, [])


def no_numa():
    cpus = {cpu: (0, 0, [cpu], list(range(4))) for cpu in range(4)}
    machine("no-numa", cpus, [("0000:01:00.0", "0x10de", "0x030200", -1)], numa=False)


def pair():
    cpus = {cpu: (cpu, cpu, [cpu], [cpu]) for cpu in range(2)}
    gpus = [("0000:01:00.0", "0x10de", "0x030200", 0), ("0000:81:00.0", "0x10de", "0x030200", 1)]
    machine("pair-2n2g", cpus, gpus)


def far():
    cpus = {cpu: (0, 0, [cpu], list(range(200, 204))) for cpu in range(200, 204)}
    machine("far-1n1g", cpus, [("0000:01:00.0", "0x10de", "0x030200", 0)])


if __name__ == "__main__":
    amd()
    intel()
    cpu_only()
    no_numa()
    pair()
    far()
