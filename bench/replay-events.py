#!/usr/bin/env python3
"""Events for `mig sched replay`, as the Performance issue sizes them:
256 processors (capacities 1, 1, 2 or 4), then submits, new VPs, VP and job
exits at random (fixed seed) with at most 64 live jobs of at most 64 VPs,
until N events (default 100,000). Writes JSON lines to standard output."""
import json
import random
import sys

n_events = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
random.seed(7)
out = sys.stdout
n = 0
for p in range(256):
    out.write(json.dumps({"event": "new_processor", "id": f"h{p // 4}/{p % 4}",
                          "arch": "x86_64", "capacity": random.choice([1, 1, 2, 4])}) + "\n")
    n += 1
live = {}      # job -> its live VP indices
nxt = {}       # job -> its next VP index
jid = 0
while n < n_events:
    if len(live) < 64 and (random.random() < 0.3 or not live):
        jid += 1
        k = random.randint(1, 64)
        j = f"j{jid}"
        live[j], nxt[j] = set(range(k)), k
        out.write(json.dumps({"event": "submit", "job": j, "vps": {"x86_64": k}}) + "\n")
    else:
        j = random.choice(sorted(live))
        r = random.random()
        if r < 0.3:
            del live[j], nxt[j]
            out.write(json.dumps({"event": "job_exit", "job": j}) + "\n")
        elif r < 0.65 and len(live[j]) > 1:
            v = random.choice(sorted(live[j]))
            live[j].discard(v)
            out.write(json.dumps({"event": "vp_exit", "job": j, "vp": v}) + "\n")
        elif len(live[j]) < 64:
            live[j].add(nxt[j])
            nxt[j] += 1
            out.write(json.dumps({"event": "new_vp", "job": j, "arch": "x86_64"}) + "\n")
        else:
            continue
    n += 1
