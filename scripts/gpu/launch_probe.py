"""A real DDP training script, timed from its launcher's start: for scripts/gpu-check.sh's
side-by-side runs of dtrun and torchrun 2.x on one machine. Nothing in it knows which launcher
started it; it reads only what torchrun documents (RANK, LOCAL_RANK, WORLD_SIZE, env://).

Usage (under a launcher): python3 launch_probe.py MODE DEVICE [STEPS]
  MODE    speed: train STEPS steps (after 10 warm-up steps) and report images/s
          crash: train, then rank 0 triggers a CUDA device-side assert (cuda) or exits 1 (cpu)
          while the other ranks keep training
  DEVICE  cuda (NCCL, one GPU per local rank; ranks beyond the GPUs share them over gloo) or
          cpu (gloo)
Reads LAUNCH_T0 (the launcher's start, CLOCK_REALTIME ns, set by the caller) and writes, if
LAUNCH_ENV_DIR is set, its whole environment to LAUNCH_ENV_DIR/rank<RANK>.env.
Prints "RESULT launch rank=R python_s=.. init_s=.. first_step_s=.. images_per_s=.." (seconds
since LAUNCH_T0) and, in crash mode, "RESULT crash error_ns=<CLOCK_REALTIME ns>" just before the
error.
"""
import os
import sys
import time

T_PYTHON = time.time_ns()  # before torch's import: what the launcher cost until the script ran

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def since_launch(t_ns):
    return (t_ns - int(os.environ["LAUNCH_T0"])) / 1e9


def model_and_data(device, batch):
    # A small ResNet-style network (convolutions, batch norm, a residual add): a real training
    # step's kernels, cheap enough to start in a second.
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(width, width, 3, padding=1, bias=False)
            self.bn1 = torch.nn.BatchNorm2d(width)
            self.conv2 = torch.nn.Conv2d(width, width, 3, padding=1, bias=False)
            self.bn2 = torch.nn.BatchNorm2d(width)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(x + self.bn2(self.conv2(y)))

    width = 64 if device.type == "cuda" else 8
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1, bias=False), torch.nn.BatchNorm2d(width),
        torch.nn.ReLU(), Block(width), Block(width), torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(), torch.nn.Linear(width, 10)).to(device)
    images = torch.randn(batch, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (batch,), device=device)
    return model, images, labels


def main():
    mode, device_name = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if os.environ.get("LAUNCH_ENV_DIR"):
        with open(os.path.join(os.environ["LAUNCH_ENV_DIR"], f"rank{rank}.env"), "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in sorted(os.environ.items()))
    cuda = device_name == "cuda"
    gpus = torch.cuda.device_count() if cuda else 0
    # NCCL refuses two ranks on one GPU: with more ranks than GPUs, gloo carries the gradients.
    backend = "nccl" if cuda and world <= gpus else "gloo"
    device = torch.device("cuda", local % gpus) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    dist.init_process_group(backend, init_method="env://")
    t_init = time.time_ns()
    batch = 256 if cuda else 32
    model, images, labels = model_and_data(device, batch)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    def step():
        loss = torch.nn.functional.cross_entropy(ddp(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    step().item()  # the first step, finished on the device
    t_first = time.time_ns()
    for _ in range(10):
        step()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"RESULT launch rank={rank} backend={backend} python_s={since_launch(T_PYTHON):.3f} "
          f"init_s={since_launch(t_init):.3f} first_step_s={since_launch(t_first):.3f} "
          f"images_per_s={steps * batch / seconds:.0f}", flush=True)
    if mode == "crash":
        if rank == 0:
            print(f"RESULT crash error_ns={time.time_ns()}", flush=True)
            if cuda:
                index = torch.tensor([10], device=device)
                torch.zeros(1, device=device)[index] = 1.0  # out of range: device-side assert
                torch.cuda.synchronize()
            sys.exit(1)
        while True:  # the others train on until their launcher stops them
            step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
