"""What `fp16studio trace --launch` costs a distributed run: two gloo ranks on the CPU, traced,
against the same `torchrun` plain, in one run.

Whole processes, as a user runs them: `torchrun --nproc-per-node 2 SCRIPT` against
`fp16studio trace --json --launch "torchrun --nproc-per-node 2" SCRIPT`, where SCRIPT is a DDP
training loop (an MLP of 4 layers, AdamW, `--steps` steps on each rank's own batch). Each rank is
traced as one process is (its first forward pass module by module, its first 2 steps followed),
writes its own files and a heartbeat twice a second; nothing is added between the ranks. Rounds
alternate so drift on the machine hits both alike; the figure is the ratio of the medians.
--cpu counts the processes' CPU seconds instead of the wall clock (steadier on a shared machine).

    python benchmarks/ranks_overhead.py [--rounds 3] [--steps 200] [--cpu]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

SCRIPT = '''\
import sys
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

steps = int(sys.argv[1])
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
                          nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10)))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
torch.manual_seed(dist.get_rank())
features, labels = torch.randn(64, 256), torch.randint(0, 10, (64,))
for step in range(steps):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(features)
    loss = nn.functional.cross_entropy(logits.float(), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(dist.get_rank(), float(loss))
dist.destroy_process_group()
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--cpu", action="store_true",
                        help="CPU seconds of the processes instead of the wall clock")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from _processes import alternate, cpu_timed, report, timed

    launch = ["torchrun", "--nproc-per-node", "2"]
    with tempfile.TemporaryDirectory() as work:
        script = Path(work) / "ddp_train.py"
        script.write_text(SCRIPT)
        plain = [*launch, str(script), str(args.steps)]
        traced = [sys.executable, "-m", "fp16studio", "trace", "--json", "--launch",
                  " ".join(launch), str(script), "--", str(args.steps)]
        tool, base = alternate(traced, plain, args.rounds,
                               clock=cpu_timed if args.cpu else timed)
    ratio = report("torchrun plain", base, "traced", tool)
    print(f"trace --launch / plain: {ratio:.2f}x ({args.steps} steps, 2 ranks, "
          f"{'CPU seconds' if args.cpu else 'wall clock'})")


if __name__ == "__main__":
    main()
