"""Synthetic tokens for nanoGPT's train.py: writes DIR/data/synthetic/{train,val}.bin (uint16, as
nanoGPT's prepare scripts do). Each token follows from the one before it (a walk over a 256-token
cycle) nine times in ten, else it is random: a model learns the rule within a few hundred
iterations, so the loss falls from ln(50304) ~ 10.8 towards the noise's floor.
  python3 make_nanogpt_data.py DIR [TOKENS]
"""
import os
import sys

import numpy as np

root, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
rng = np.random.default_rng(1)
noise = rng.random(count) < 0.1
random_tokens = rng.integers(0, 256, count)
tokens = np.empty(count, dtype=np.uint16)
tokens[0] = 0
for i in range(1, count):
    tokens[i] = random_tokens[i] if noise[i] else (tokens[i - 1] * 5 + 7) % 256
out = os.path.join(root, "data", "synthetic")
os.makedirs(out, exist_ok=True)
split = count * 9 // 10
tokens[:split].tofile(os.path.join(out, "train.bin"))
tokens[split:].tofile(os.path.join(out, "val.bin"))
print(f"make_nanogpt_data: {split} train and {count - split} val tokens in {out}")
