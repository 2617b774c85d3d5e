"""Workers for scripts/gpu-check.sh: unmodified PyTorch 2.x code run under dtrun on a GPU machine.

Usage (one process per rank, under dtrun): python3 torch_checks.py MODE [args]
  nccl          init_process_group("nccl", env://): all_reduce, broadcast, all_gather, barrier
  store         torch's TCPStore client against dtrun's store at MASTER_ADDR:MASTER_PORT: every
                operation the Python binding of this torch has (those absent are listed)
  elastic       the TORCHELASTIC_* variables torchrun sets, then @record and a ValueError
  cuda_error    @record and a CUDA device-side assert (the failure report must name it)
  lightning     a Lightning Trainer, strategy="ddp", on the GPU (1 rank) or CPU (argv: cpu)
  accelerate    an accelerate Accelerator training loop, GPU or CPU (argv: cpu)
  resnet        ResNet-18 (CIFAR variant) on a synthetic CIFAR-sized sample on the GPU: loss per
                epoch, a checkpoint, a resume, images/s; argv: ddp|plain STEPS CKPT_DIR [bf16|fp32]
                (bf16: autocast and channels-last, the default; fp32: neither)
  resnet_speed  only the throughput of resnet's DDP (no checkpoint), as demos/resnet_ddp measures
                it: argv: fp32|bf16|bf16-nchw STEPS (bf16-nchw: autocast without channels-last)
  fr_hang       NCCL, 5 all_reduces, then a barrier queued behind a long GPU sleep: a hang for
                dtrun's --hang_timeout, whose dump asks torch's flight recorder for its record
  fr_read       (no launcher) argv: DUMP: the flight recorder's pickle, summarised
  debug_server  torch.distributed.debug's server (torch >= 2.10) over dtrun's store: its pages
Each mode prints "RESULT <mode> key=value ..." lines that gpu-check.sh reads; exits non-zero on a
mismatch.
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def result(mode, **fields):
    print("RESULT " + mode + " " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def fail(msg):
    print(f"torch_checks: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def mode_nccl():
    dist.init_process_group("nccl", init_method="env://", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    if x[0].item() != n * (n + 1) / 2:
        fail(f"all_reduce gave {x[0].item()}")
    y = torch.arange(8, device="cuda", dtype=torch.float32) * (rank + 1)
    dist.broadcast(y, 0)
    gathered = [torch.empty(4, device="cuda") for _ in range(n)]
    dist.all_gather(gathered, torch.full((4,), float(rank), device="cuda"))
    dist.barrier()
    torch.cuda.synchronize()
    result("nccl", rank=rank, world=n, nccl=".".join(map(str, torch.cuda.nccl.version())),
           all_reduce="ok", broadcast="ok", all_gather="ok", barrier="ok")
    dist.destroy_process_group()


def mode_store():
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    s = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=20))
    p = f"gpucheck/{os.getpid()}/"
    done, absent = [], []

    def check(name, ok):
        if not ok:
            fail(f"store {name}")
        done.append(name)

    s.set(p + "a", b"1")
    check("set/get", s.get(p + "a") == b"1")
    check("add", s.add(p + "n", 5) == 5 and s.add(p + "n", -2) == 3)
    check("compare_set", s.compare_set(p + "a", b"1", b"2") == b"2"
          and s.compare_set(p + "a", b"x", b"3") == b"2")
    s.wait([p + "a", p + "n"], timedelta(seconds=5))
    done.append("wait")
    if hasattr(s, "check"):
        check("check", s.check([p + "a"]) and not s.check([p + "missing"]))
    else:
        absent.append("check")
    check("num_keys", s.num_keys() >= 2)
    check("delete_key", s.delete_key(p + "a") and not s.delete_key(p + "a"))
    if hasattr(s, "multi_set"):
        s.multi_set([p + "m1", p + "m2"], [b"x", b"y"])
        check("multi_set/multi_get", s.multi_get([p + "m1", p + "m2"]) == [b"x", b"y"])
    else:
        absent.append("multi_set/multi_get")
    if hasattr(s, "append"):
        s.append(p + "ap", b"ab")
        s.append(p + "ap", b"cd")
        check("append", s.get(p + "ap") == b"abcd")
    else:
        absent.append("append")
    if hasattr(s, "queue_push"):
        s.queue_push(p + "q", b"one")
        s.queue_push(p + "q", b"two")
        check("queue_len", s.queue_len(p + "q") == 2)
        check("queue_pop", s.queue_pop(p + "q") == b"one" and s.queue_pop(p + "q") == b"two")
    else:
        absent.append("queue_push/queue_pop/queue_len")
    if hasattr(s, "list_keys"):
        check("list_keys", any(k.endswith("ap") for k in map(str, s.list_keys())))
    try:
        s.wait([p + "never"], timedelta(milliseconds=300))
        fail("wait on a missing key did not time out")
    except Exception:  # noqa: BLE001 - torch raises DistStoreError (a RuntimeError) here
        done.append("wait-timeout")
    result("store", torch=torch.__version__, ops=len(done), checked=",".join(done),
           absent=",".join(absent) or "none", libuv=getattr(s, "libUvBackend", "n/a"))


def mode_elastic():
    from torch.distributed.elastic.multiprocessing.errors import record

    want = ["TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
            "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "GROUP_RANK", "ROLE_RANK",
            "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
    missing = [v for v in want if v not in os.environ]
    result("elastic", missing=",".join(missing) or "none",
           error_file=os.path.basename(os.environ.get("TORCHELASTIC_ERROR_FILE", "")))

    @record
    def main():
        raise ValueError("planted by gpu-check")

    main()


def mode_cuda_error():
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        x = torch.zeros(4, device="cuda")
        index = torch.tensor([7], device="cuda")
        y = x[index]  # out of bounds: a device-side assert
        torch.cuda.synchronize()
        print(y)

    main()


def mode_lightning(device):
    import lightning as L

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(32, 1)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(512, 32), torch.randn(512, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=32)
    n = int(os.environ["LOCAL_WORLD_SIZE"])
    trainer = L.Trainer(accelerator=device, devices=n, num_nodes=int(os.environ["GROUP_WORLD_SIZE"]),
                        strategy="ddp", max_steps=10, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), loader)
    env = type(trainer.strategy.cluster_environment).__name__
    if trainer.world_size != int(os.environ["WORLD_SIZE"]) or trainer.global_rank != int(os.environ["RANK"]):
        fail(f"Lightning sees world {trainer.world_size} rank {trainer.global_rank}")
    result("lightning", device=device, env=env, world=trainer.world_size,
           rank=trainer.global_rank, steps=trainer.global_step, version=L.__version__)


def mode_accelerate(device):
    import accelerate

    acc = accelerate.Accelerator(cpu=device == "cpu")
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randn(256, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    model, opt, loader = acc.prepare(model, opt, loader)
    steps = 0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        acc.backward(loss)
        opt.step()
        opt.zero_grad()
        steps += 1
    if acc.num_processes != int(os.environ["WORLD_SIZE"]) or acc.process_index != int(os.environ["RANK"]):
        fail(f"accelerate sees {acc.num_processes} processes, index {acc.process_index}")
    result("accelerate", device=device, type=str(acc.distributed_type).split(".")[-1],
           processes=acc.num_processes, index=acc.process_index, steps=steps,
           version=accelerate.__version__)


def resnet_on_this_gpu():
    """ResNet18's class (the same model as bench/ddp and demos/resnet_ddp) and the local rank,
    whose GPU is now the current one, cuDNN's benchmark on."""
    repo = os.environ.get("DTRUN_REPO",
                          os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    sys.path.insert(0, os.path.join(repo, "bench", "ddp"))
    from torch_resnet_ddp import ResNet18

    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    torch.backends.cudnn.benchmark = True
    return ResNet18, local


def mode_resnet(kind, steps, ckpt_dir, precision="bf16"):
    ResNet18, local = resnet_on_this_gpu()
    steps = int(steps)
    ddp = kind == "ddp"
    if ddp:
        dist.init_process_group("nccl", init_method="env://", timeout=timedelta(seconds=120))
    torch.manual_seed(0)
    # bf16: autocast and channels-last, the fast way; fp32: neither, as demos/resnet_ddp trains.
    bf16 = precision == "bf16"
    layout = torch.channels_last if bf16 else torch.contiguous_format
    model = ResNet18().cuda().to(memory_format=layout)
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = 256
    # A fixed synthetic CIFAR-sized sample whose labels follow from the images: the loss can fall.
    gen = torch.Generator(device="cuda").manual_seed(1)
    images = torch.randn(4096, 3, 32, 32, device="cuda", generator=gen)
    labels = (images[:, 0, :8, :8].mean(dim=(1, 2)) * 40).long().clamp(-5, 4) + 5
    images = images.contiguous(memory_format=layout)

    def autocast():
        return torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16)

    def run_epoch():
        total, count = 0.0, 0
        for i in range(0, images.size(0), batch):
            with autocast():
                loss = torch.nn.functional.cross_entropy(model(images[i:i + batch]), labels[i:i + batch])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item()
            count += 1
        return total / count

    losses = [run_epoch() for _ in range(3)]
    path = os.path.join(ckpt_dir, f"resnet-{kind}.pt")
    state = model.module.state_dict() if ddp else model.state_dict()
    torch.save({"model": state, "opt": opt.state_dict(), "epoch": 3}, path)
    ckpt = torch.load(path, map_location="cuda")
    (model.module if ddp else model).load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    resumed = run_epoch()
    # Throughput: `steps` steps of one batch after 10 warm-up steps.
    x, y = images[:batch], labels[:batch]
    for i in range(10 + steps):
        if i == 10:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with autocast():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result("resnet", kind=kind, loss=",".join(f"{v:.3f}" for v in losses), resumed=f"{resumed:.3f}",
           falls=int(losses[-1] < losses[0] and resumed <= losses[0]), epoch_after_resume=ckpt["epoch"] + 1,
           images_per_s=f"{steps * batch / seconds:.0f}", batch=batch, precision="bf16-autocast" if bf16 else "fp32")
    if ddp:
        dist.destroy_process_group()


def resnet_step_fn(model, opt, bf16):
    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


def mode_resnet_speed(precision, steps):
    ResNet18, local = resnet_on_this_gpu()
    steps = int(steps)
    dist.init_process_group("nccl", init_method="env://", timeout=timedelta(seconds=120))
    torch.manual_seed(0)
    bf16 = precision != "fp32"
    layout = torch.channels_last if precision == "bf16" else torch.contiguous_format
    model = torch.nn.parallel.DistributedDataParallel(
        ResNet18().cuda().to(memory_format=layout), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = 256
    x = torch.randn(batch, 3, 32, 32, device="cuda").contiguous(memory_format=layout)
    y = torch.randint(0, 10, (batch,), device="cuda")
    step = resnet_step_fn(model, opt, bf16)
    for _ in range(10):
        step(x, y)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result("resnet_speed", precision=precision, images_per_s=f"{steps * batch / seconds:.0f}",
           batch=batch, steps=steps)
    dist.destroy_process_group()


def mode_fr_hang():
    dist.init_process_group("nccl", init_method="env://", timeout=timedelta(seconds=600))
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(1 << 16, device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    print("fr_hang: 5 all_reduces done; the barrier waits behind a GPU sleep", flush=True)
    torch.cuda._sleep(1 << 40)  # minutes of GPU clock cycles: the collective cannot start
    dist.barrier()
    torch.cuda.synchronize()
    fail("the barrier returned: no hang")


def mode_fr_read(dump):
    import pickle
    with open(dump, "rb") as f:
        record = pickle.load(f)
    entries = record.get("entries", [])
    names = [e.get("profiling_name", "?") for e in entries]
    states = [e.get("state", "?") for e in entries]
    last = f"{names[-1]}:{states[-1]}" if entries else "none"
    result("fr_read", version=record.get("version", "?"), entries=len(entries),
           completed=states.count("completed"), last=last,
           keys=",".join(sorted(record.keys())))


def mode_debug_server():
    import inspect
    import re
    import socket
    import urllib.request
    try:
        import torch.distributed.debug as debug
    except ImportError as e:
        result("debug_server", present=0, why=type(e).__name__)
        return
    dist.init_process_group("nccl", init_method="env://", timeout=timedelta(seconds=120))
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    x = torch.ones(16, device="cuda")
    dist.all_reduce(x)  # something for the flight recorder's page
    torch.cuda.synchronize()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kwargs = {"port": port}
    if "start_method" in inspect.signature(debug.start_debug_server).parameters:
        kwargs["start_method"] = "spawn"  # the frontend must not inherit CUDA through fork
    debug.start_debug_server(**kwargs)

    def get(path, timeout):
        try:
            with urllib.request.urlopen(f"http://localhost:{port}{path}", timeout=timeout) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, ""
        except OSError as e:
            return 0, str(e)

    deadline = time.time() + 60
    status, index = get("/", 5)
    while status != 200 and time.time() < deadline:
        time.sleep(0.5)
        status, index = get("/", 5)
    pages = {"/": status}
    for path in sorted(set(re.findall(r'href="(/[^"]*)"', index)))[:6]:
        pages[path] = get(path, 15)[0]
    debug.stop_debug_server()
    ok = sum(1 for code in pages.values() if code == 200)
    result("debug_server", present=1, pages_ok=f"{ok}/{len(pages)}",
           pages=",".join(f"{p}:{c}" for p, c in pages.items()))
    dist.destroy_process_group()
    if status != 200 or ok < 2:
        fail(f"debug server pages: {pages}")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    {"nccl": mode_nccl, "store": mode_store, "elastic": mode_elastic,
     "cuda_error": mode_cuda_error, "lightning": mode_lightning, "accelerate": mode_accelerate,
     "resnet": mode_resnet, "resnet_speed": mode_resnet_speed, "fr_hang": mode_fr_hang,
     "fr_read": mode_fr_read, "debug_server": mode_debug_server}[mode](*args)
