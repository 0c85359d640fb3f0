#!/usr/bin/env python3
"""torch's fused AdamW as bench_adamw's peer (bench/README.md).

    python3 bench/torch_adamw_peer.py -n PARAMS [-r REPS] [--threads N]

Times torch.optim.AdamW(fused=True).step() over one fp32 tensor of PARAMS
parameters whose gradient is set, with bench_adamw's hyperparameters (lr 1e-4,
betas 0.9/0.95, eps 1e-8, weight decay 0.1), on N threads (default
OMP_NUM_THREADS, else torch's default). One warm-up step (the moments' first
touch), then the best of REPS steps. Prints one line:

    torch fused AdamW: <Mparam/s> Mparam/s <GB/s> GB/s (28 B/param), best of REPS

(28 B/param: it reads p, g, m, v and writes p, m, v, as bench_adamw's
"adamw" line without the bf16 copy). Without torch it prints why on one line
and exits 77, so bench_adamw goes on without the peer.
"""
import argparse
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, required=True, help="parameters")
    ap.add_argument("-r", type=int, default=5, help="timed steps (best of)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads")
    a = ap.parse_args()
    if a.n < 1 or a.r < 1:
        print("torch_adamw_peer.py: -n and -r must be >= 1", file=sys.stderr)
        return 2
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        print(f"torch fused AdamW: skipped (torch not importable: {e})")
        return 77
    threads = a.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads > 0:
        torch.set_num_threads(threads)
    # values in the range bench_adamw gives its state
    i = torch.arange(a.n, dtype=torch.int64)
    x = ((i * 2654435761) % 1000).to(torch.float32) * 1e-3 - 0.5
    del i
    p = torch.nn.Parameter(x.clone())
    p.grad = 1e-3 * x
    del x
    try:
        opt = torch.optim.AdamW([p], lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                fused=True)
        opt.step()  # warm-up: the moments are allocated and first touched here
    except Exception as e:  # a torch without fused AdamW on the CPU
        print(f"torch fused AdamW: skipped (torch {torch.__version__}: {e})")
        return 77
    best = float("inf")
    for _ in range(a.r):
        t0 = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t0)
    pps = a.n / best
    print(f"torch fused AdamW: {pps / 1e6:.1f} Mparam/s {28 * pps / 1e9:.2f} GB/s "
          f"(28 B/param), best of {a.r}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
