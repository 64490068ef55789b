"""The user's own training loop for the same model and data: what the run they rent will do.

    python train.py --updates 200 --microbatch 8 --accumulation 2 [--seed 0]

Prints one JSON line: the seconds from building the model through the last update (imports and
data preparation left out, as the plan leaves them out — torch._dynamo too, which torch would
otherwise import inside the first optimizer, as the runner imports it before its phases), the
mean seconds of an update after the first (`step_s`: what steady's step time predicts), and the
updates it took.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import torch
import torch._dynamo  # torch imports it inside the first optimizer (seconds on a CPU): an import, not training
import torch.nn.functional as F
from data import VOCAB, windows
from model import GPT, GPTConfig


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--microbatch", type=int, default=8)
    parser.add_argument("--accumulation", type=int, default=2)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--n-docs", type=int, default=120)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda: where the model and batches live")
    args = parser.parse_args()
    device = torch.device(args.device)
    examples = windows(args.n_docs, args.block, args.seed)
    rng = random.Random(args.seed)

    t0 = time.perf_counter()
    torch.manual_seed(args.seed)
    model = GPT(GPTConfig(block_size=args.block, vocab_size=VOCAB)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    model.train()
    first_done = t0
    for update in range(args.updates):
        if update == 1:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            first_done = time.perf_counter()  # the updates after the first: its steady step
        optimizer.zero_grad(set_to_none=True)
        for _ in range(args.accumulation):
            rows = [ex["ids"] for ex in rng.sample(examples, args.microbatch)]
            batch = torch.tensor(rows, dtype=torch.long).to(device, non_blocking=True)
            x, y = batch[:, :-1], batch[:, 1:]
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            (loss / args.accumulation).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the last update's kernels finished, as a real run's end waits
    end = time.perf_counter()
    steady = (end - first_done) / (args.updates - 1) if args.updates > 1 else float("nan")
    print(json.dumps({"seconds": end - t0, "step_s": steady, "updates": args.updates, "loss": loss.item()}))


if __name__ == "__main__":
    main()
