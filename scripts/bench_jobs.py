#!/usr/bin/env python3
"""The job stream benchmark behind scripts/bench-jobs.sh (standard library only).

  bench_jobs.py BASE OPERATOR_TOKEN TENANT_TOKEN ORG DB NODES JOBS

Builds a one-region catalog (h100x1/2/4/8) with NODES simulated 8-GPU
nodes, submits JOBS one-second jobs over REST as fast as the API takes them
(16 clients; 40 % 1 GPU, 25 % 2, 20 % 4, 10 % 8, 5 % two nodes of 8, in a
seeded random order), then reads the SQLite file DB to time the stream.
"""
import concurrent.futures
import datetime
import json
import random
import sqlite3
import statistics
import sys
import time

from bench_orders import call, percentile

MIX = [("h100x1", 1, 40), ("h100x2", 1, 25), ("h100x4", 1, 20), ("h100x8", 1, 10), ("h100x8", 2, 5)]


def when(text):
    text = text.replace(" ", "T")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    # SQLite keeps nanoseconds; Python reads microseconds.
    head, _, tail = text.partition(".")
    if tail:
        digits = "".join(c for c in tail if c.isdigit())
        zone = tail[len(digits):]
        text = f"{head}.{digits[:6]}{zone}"
    return datetime.datetime.fromisoformat(text).timestamp()


def catalog(base, op, nodes):
    admin = f"{base}/api/v1/admin"
    call("POST", f"{admin}/catalog/regions", op, {"name": "bench", "display_name": "Bench", "time_zone": "UTC"})
    call("POST", f"{admin}/catalog/gpu-models", op,
         {"name": "H100", "vendor": "NVIDIA", "memory_gib": 80, "interconnect": "nvlink"})
    for gpus in (1, 2, 4, 8):
        kind = call("POST", f"{admin}/catalog/instance-types", op,
                    {"name": f"h100x{gpus}", "gpu_model": "H100", "gpus_per_node": gpus,
                     "vcpus": 12 * gpus, "memory_gib": 100 * gpus})
        call("POST", f"{admin}/catalog/instance-types/{kind['id']}/prices", op,
             {"pricing_class": "on_demand", "hourly_micros": 2_000_000 * gpus})
    for i in range(nodes):
        call("POST", f"{admin}/nodes", op,
             {"name": f"node-{i:03}", "region": "bench", "instance_type": "h100x8", "rack": f"rack-{i // 16}"})


def main():
    base, op, token, org, db_path, nodes, jobs = sys.argv[1:8]
    nodes, jobs = int(nodes), int(jobs)
    catalog(base, op, nodes)
    rng = random.Random(42)
    shapes = [(t, n) for t, n, share in MIX for _ in range(share)]
    bodies = []
    for i in range(jobs):
        kind, count = shapes[rng.randrange(len(shapes))]
        bodies.append({"instance_type": kind, "node_count": count, "duration_seconds": 1,
                       "job": {"command": f"train --trial {i}"}})
    url = f"{base}/api/v1/orgs/{org}/orders"
    first = time.time()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda body: call("POST", url, token, body), bodies))
    last = time.time()
    accepted = jobs / (last - first)

    db = sqlite3.connect(db_path)
    started_all = None
    deadline = time.time() + 600
    while time.time() < deadline:
        started, done = db.execute(
            "SELECT COUNT(started_at), SUM(status = 'completed' AND ended_at IS NOT NULL) FROM orders "
            "WHERE kind = 'job'").fetchone()
        if started_all is None and started == jobs:
            started_all = time.time()
        if done == jobs:
            break
        time.sleep(0.1)
    rows = db.execute("SELECT created_at, started_at, ended_at FROM orders WHERE kind = 'job'").fetchall()
    if any(r[2] is None for r in rows):
        sys.exit("not every job completed within 10 minutes")
    waits = [when(s) - when(c) for c, s, _ in rows]
    end = max(when(e) for _, _, e in rows)
    makespan = end - first
    held = db.execute(
        "SELECT a.created_at, a.released_at, a.gpu_indices FROM allocations a JOIN orders o ON o.id = a.order_id "
        "WHERE o.kind = 'job'").fetchall()
    gpu_seconds = sum((when(r) - when(c)) * len(json.loads(g)) for c, r, g in held)
    print(f"cluster: {nodes} nodes x 8 GPUs; jobs: {jobs} of 1 s")
    print(f"submission: {last - first:.1f} s, {accepted:.0f} jobs/s accepted")
    if started_all is not None:
        print(f"last submission -> all started: {max(0.0, started_all - last):.1f} s")
    print(f"first submission -> all completed: {makespan:.1f} s")
    print(f"wait (created -> started): mean {statistics.mean(waits):.1f} s, p95 {percentile(waits, 95):.1f} s")
    print(f"mean GPU allocation over the stream: {100 * gpu_seconds / (8 * nodes * makespan):.1f} %")
    work = sum(int(n) * g for _, n, g in [(t, n, {"h100x1": 1, "h100x2": 2, "h100x4": 4, "h100x8": 8}[t])
                                          for t, n in ((b["instance_type"], b["node_count"]) for b in bodies)])
    print(f"of it running jobs' 1 s of work: {100 * work / (8 * nodes * makespan):.1f} %")


if __name__ == "__main__":
    main()
