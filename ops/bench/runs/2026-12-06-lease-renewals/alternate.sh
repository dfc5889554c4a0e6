#!/bin/bash
# alternate in_flight between the base clone and this one, the order swapped each round
out=/work/fix5/ops/bench/runs/2026-12-06-lease-renewals
export TICKWORK_BENCH_REDIS=redis://127.0.0.1:6379/7
for round in 1 2 3 4 5 6; do  # run as 1-4, then 5-6 appended
  if [ $((round % 2)) -eq 1 ]; then order="fix5-base fix5"; else order="fix5 fix5-base"; fi
  for clone in $order; do
    echo "== round $round $clone $(git -C /work/$clone rev-parse --short HEAD)$(git -C /work/$clone diff --quiet || echo +changes) $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    (cd /work/$clone && timeout 400 .venv/bin/python ops/bench/in_flight.py --sessions 500 --pools "$POOLS" 2>&1 | grep -v "^{" )
  done
done
