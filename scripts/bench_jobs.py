#!/usr/bin/env python3
"""The job stream benchmark behind scripts/bench-jobs.sh (standard library only).

  bench_jobs.py BASE OPERATOR_TOKEN TENANT_TOKEN ORG DB NODES JOBS [AGENT_BIN_DIR]

Builds a one-region catalog (h100x1/2/4/8) with NODES simulated 8-GPU
nodes, submits JOBS one-second jobs over REST as fast as the API takes them
(16 clients; 40 % 1 GPU, 25 % 2, 20 % 4, 10 % 8, 5 % two nodes of 8, in a
seeded random order), then reads the SQLite file DB to time the stream.

With AGENT_BIN_DIR the nodes are real `gantry-agent` processes from that
directory (simulated GPUs, the sandbox runtime, each emulating a server of
96 cores and 800 GiB), every job runs `sleep 1`, and the jobs come in the
order the Slurm peer benchmark submits them: job i by (i * 37) % 100.
Each job runs in its image (a 1 GiB disk, one image store shared by the
agents): AGENT_ARGS names it and its registry, such as "--default-image
127.0.0.1:5000/gantry-test/debian:bookworm --insecure-registry
127.0.0.1:5000" (scripts/test-fixtures.sh builds that image).
"""
import concurrent.futures
import datetime
import json
import os
import random
import sqlite3
import statistics
import subprocess
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


def peer_shape(i):
    """The Slurm peer benchmark's job i: (instance type, node count)."""
    k = i * 37 % 100
    if k < 40:
        return "h100x1", 1
    if k < 65:
        return "h100x2", 1
    if k < 85:
        return "h100x4", 1
    if k < 95:
        return "h100x8", 1
    return "h100x8", 2


def start_agents(base, op, nodes, bin_dir, work):
    """NODES real agents, each its own emulated 8-GPU server; waits until all are ready."""
    agents = []
    for i in range(nodes):
        token = call("POST", f"{base}/api/v1/admin/join-tokens", op, {"region": "bench"})["token"]
        state = os.path.join(work, f"agent-{i:03}")
        log = open(os.path.join(work, f"agent-{i:03}.log"), "w")
        agents.append(subprocess.Popen(
            [f"{bin_dir}/gantry-agent", "--server", base, "--name", f"node-{i:03}", "--rack", f"rack-{i // 16}",
             "--simulate-gpus", "8xH100", "--simulate-cpu-milli", "96000", "--simulate-memory-mib", "819200",
             "--state-dir", state, "--uid-range", f"{100_000_000 + (i << 24)}-{100_000_000 + ((i + 1) << 24) - 1}",
             "--port-range", f"{42000 + 50 * i}-{42049 + 50 * i}", "--grace-seconds", "5",
             "--image-dir", os.path.join(work, "images"), "--image-store-gib", "0",
             "--default-disk-gib", "1", "--disk-reserve-gib", "1",
             *os.environ.get("AGENT_ARGS", "").split()],
            env=dict(os.environ, GANTRY_JOIN_TOKEN=token), stdout=log, stderr=subprocess.STDOUT))
    deadline = time.time() + 120
    while time.time() < deadline:
        ready = [n for n in call("GET", f"{base}/api/v1/admin/nodes?limit=200", op)["items"] if n["state"] == "ready"]
        if len(ready) == nodes:
            return agents
        time.sleep(0.2)
    sys.exit(f"only {len(ready)} of {nodes} agents became ready")


def catalog(base, op, nodes, simulated=True):
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
    for i in range(nodes if simulated else 0):
        call("POST", f"{admin}/nodes", op,
             {"name": f"node-{i:03}", "region": "bench", "instance_type": "h100x8", "rack": f"rack-{i // 16}"})


def main():
    base, op, token, org, db_path, nodes, jobs = sys.argv[1:8]
    agent_bin = sys.argv[8] if len(sys.argv) > 8 else None
    nodes, jobs = int(nodes), int(jobs)
    catalog(base, op, nodes, simulated=agent_bin is None)
    agents = start_agents(base, op, nodes, agent_bin, os.path.dirname(db_path)) if agent_bin else []
    try:
        run(base, token, org, db_path, nodes, jobs, agent_bin is not None)
    finally:
        for agent in agents:
            agent.terminate()
        for agent in agents:
            agent.wait()


def run(base, token, org, db_path, nodes, jobs, real):
    rng = random.Random(42)
    shapes = [(t, n) for t, n, share in MIX for _ in range(share)]
    bodies = []
    for i in range(jobs):
        kind, count = peer_shape(i) if real else shapes[rng.randrange(len(shapes))]
        command = "sleep 1" if real else f"train --trial {i}"
        bodies.append({"instance_type": kind, "node_count": count, "duration_seconds": 1,
                       "job": {"command": command}})
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
            "SELECT COUNT(started_at), SUM(status IN ('completed', 'failed') AND ended_at IS NOT NULL) "
            "FROM orders WHERE kind = 'job'").fetchone()
        if started_all is None and started == jobs:
            started_all = time.time()
        if done == jobs:
            break
        time.sleep(0.1)
    rows = db.execute("SELECT created_at, started_at, ended_at FROM orders WHERE kind = 'job'").fetchall()
    if any(r[2] is None for r in rows):
        sys.exit("not every job ended within 10 minutes")
    waits = [when(s) - when(c) for c, s, _ in rows]
    end = max(when(e) for _, _, e in rows)
    makespan = end - first
    held = db.execute(
        "SELECT a.created_at, a.released_at, a.gpu_indices FROM allocations a JOIN orders o ON o.id = a.order_id "
        "WHERE o.kind = 'job'").fetchall()
    gpu_seconds = sum((when(r) - when(c)) * len(json.loads(g)) for c, r, g in held)
    print(f"cluster: {nodes} nodes x 8 GPUs; jobs: {jobs} of 1 s")
    for reason, count in db.execute(
            "SELECT failure_reason, COUNT(*) FROM orders WHERE kind = 'job' AND status = 'failed' GROUP BY 1"):
        print(f"FAILED: {count} jobs: {reason}")
    print(f"submission: {last - first:.1f} s, {accepted:.0f} jobs/s accepted")
    if started_all is not None:
        print(f"last submission -> all started: {max(0.0, started_all - last):.1f} s")
    print(f"first submission -> all completed: {makespan:.1f} s")
    print(f"wait (created -> started): mean {statistics.mean(waits):.1f} s, p95 {percentile(waits, 95):.1f} s")
    print(f"mean GPU allocation over the stream: {100 * gpu_seconds / (8 * nodes * makespan):.1f} %")
    work = sum(int(n) * g for _, n, g in [(t, n, {"h100x1": 1, "h100x2": 2, "h100x4": 4, "h100x8": 8}[t])
                                          for t, n in ((b["instance_type"], b["node_count"]) for b in bodies)])
    print(f"of it running jobs' 1 s of work: {100 * work / (8 * nodes * makespan):.1f} %")
    # Where the GPUs' time around each second of work goes.
    spans = db.execute(
        "SELECT a.created_at, a.running_since, a.released_at FROM allocations a JOIN orders o ON o.id = a.order_id "
        "WHERE o.kind = 'job' AND a.running_since IS NOT NULL").fetchall()
    bring_up = [1000 * (when(r) - when(c)) for c, r, _ in spans]
    wind_down = [1000 * (when(e) - when(r) - 1) for _, r, e in spans]
    print(f"allocated -> running: mean {statistics.mean(bring_up):.0f} ms, p95 {percentile(bring_up, 95):.0f} ms; "
          f"running + 1 s -> released: mean {statistics.mean(wind_down):.0f} ms, p95 {percentile(wind_down, 95):.0f} ms")


if __name__ == "__main__":
    main()
