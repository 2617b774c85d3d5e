"""PyTorch's side of bench/ddp: the same ResNet-18 (CIFAR variant) as demos/resnet_ddp, trained
with torch.nn.parallel.DistributedDataParallel over gloo on the same CIFAR-10 binary files, one
process per rank under dtrun (or torchrun). No torchvision: the model, the loader and the
augmentation (random crop of the zero-padded image, horizontal flip) are written out here.

  PYTHON_EXEC=/usr/bin/python3 dtrun --nproc_per_node=2 bench/ddp/torch_resnet_ddp.py \
      --data-dir DIR --batch-size 32 --max-steps 8 --warmup-steps 2

Rank 0 prints progress lines and, at the end, the line bench/ddp/run.sh reads:
  throughput: 41.2 images/s (2 ranks, 6 steps after 2 warm-up, batch 32 per rank)
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
STD = torch.tensor([0.2023, 0.1994, 0.2010]).view(1, 3, 1, 1)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class ResNet18(nn.Module):
    def __init__(self, width=64, classes=10):
        super().__init__()
        w = width
        self.conv1 = nn.Conv2d(3, w, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(w)
        self.layer1 = nn.Sequential(BasicBlock(w, w, 1), BasicBlock(w, w, 1))
        self.layer2 = nn.Sequential(BasicBlock(w, 2 * w, 2), BasicBlock(2 * w, 2 * w, 1))
        self.layer3 = nn.Sequential(BasicBlock(2 * w, 4 * w, 2), BasicBlock(4 * w, 4 * w, 1))
        self.layer4 = nn.Sequential(BasicBlock(4 * w, 8 * w, 2), BasicBlock(8 * w, 8 * w, 1))
        self.fc = nn.Linear(8 * w, classes)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.layer4(self.layer3(self.layer2(self.layer1(y))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


def load_cifar(data_dir):
    raw = bytearray()
    for i in range(1, 6):
        path = os.path.join(data_dir, "data_batch_%d.bin" % i)
        if os.path.exists(path):
            with open(path, "rb") as f:
                raw += f.read()
    if not raw or len(raw) % 3073:
        raise SystemExit("torch_resnet_ddp: no valid data_batch_*.bin in " + data_dir)
    records = torch.frombuffer(raw, dtype=torch.uint8).view(-1, 3073)
    return records[:, 1:].reshape(-1, 3, 32, 32).clone(), records[:, 0].long().clone()


def augment(images, gen):
    padded = F.pad(images, (4, 4, 4, 4))
    out = torch.empty_like(images)
    offsets = torch.randint(0, 9, (images.size(0), 2), generator=gen).tolist()
    flips = torch.rand(images.size(0), generator=gen).lt(0.5).tolist()
    for i, ((dy, dx), flip) in enumerate(zip(offsets, flips)):
        crop = padded[i, :, dy:dy + 32, dx:dx + 32]
        out[i] = crop.flip(2) if flip else crop
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=0.1)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--random-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads per rank (0 = OMP_NUM_THREADS / torch's default)")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)

    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(a.random_seed)
    images, labels = load_cifar(a.data_dir)
    model = nn.parallel.DistributedDataParallel(ResNet18(a.width))
    optimizer = torch.optim.SGD(model.parameters(), lr=a.learning_rate, momentum=0.9,
                                weight_decay=1e-5)
    criterion = nn.CrossEntropyLoss()
    sampler = torch.utils.data.DistributedSampler(range(len(labels)), num_replicas=world,
                                                  rank=rank, seed=a.random_seed)
    gen = torch.Generator().manual_seed(a.random_seed * 7919 + rank)
    if rank == 0:
        print("torch_resnet_ddp: %d rank(s), %d images, width %d, batch %d per rank, torch %s, "
              "%d thread(s) per rank" % (world, len(labels), a.width, a.batch_size,
                                         torch.__version__, torch.get_num_threads()), flush=True)
    model.train()
    step, measured_s, measured_steps, measured_images = 0, 0.0, 0, 0
    epoch = 0
    while step < a.max_steps:
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(sampler), dtype=torch.long)
        for first in range(0, len(idx), a.batch_size):
            if step >= a.max_steps:
                break
            t0 = time.perf_counter()
            batch = idx[first:first + a.batch_size]
            x = augment(images.index_select(0, batch), gen)
            x = (x.float().div(255.0) - MEAN) / STD
            y = labels.index_select(0, batch)
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            dt = time.perf_counter() - t0
            step += 1
            if step > a.warmup_steps:
                measured_s += dt
                measured_steps += 1
                measured_images += len(batch)
            if rank == 0 and step % a.log_every == 0:
                print("step %d loss %.4f" % (step, loss.item()), flush=True)
        epoch += 1
    if rank == 0:
        rate = measured_images / measured_s * world if measured_s > 0 else 0.0
        print("throughput: %.1f images/s (%d rank%s, %d steps after %d warm-up, batch %d per rank)"
              % (rate, world, "" if world == 1 else "s", measured_steps, a.warmup_steps,
                 a.batch_size), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
