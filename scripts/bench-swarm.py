#!/usr/bin/env python3
"""The agent protocol at fleet size: NODES emulated nodes (one process,
the agent's own client: register, heartbeat with telemetry every 2 s,
long-poll assignments, batched reports, work run as timers) against one
release server on PostgreSQL, while tenants' reads are timed beside the
same reads on the same server before the swarm joined.

  1. wrk, 8 connections, DURATION s, GET a tenant's orders: idle server;
  2. the swarm joins; once every node has registered and had one interval
     to get in step, its measured window starts: heartbeat and report
     latencies from the swarm, the server's CPU from /proc over the
     window, JOBS one-second jobs submitted at its start, and the same wrk
     as (1) during it.

    cargo build --release -p gantry-server --bin gantry
    cargo build --release -p gantry-agent --example swarm
    scripts/bench-swarm.py

GANTRY_BIN (default target/release/gantry), SWARM_BIN (default
target/release/examples/swarm), GANTRY_BENCH_ADMIN_URL (default
postgres://postgres@127.0.0.1:5432/postgres; a database gantry_swarm is
made afresh there), NODES (default 1000), DURATION (default 30), JOBS
(default NODES / 10).
"""

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_orders import call, login, ready  # noqa: E402

BIN = os.environ.get("GANTRY_BIN", "target/release/gantry")
SWARM = os.environ.get("SWARM_BIN", "target/release/examples/swarm")
ADMIN = os.environ.get("GANTRY_BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
NODES = int(os.environ.get("NODES", "1000"))
DURATION = int(os.environ.get("DURATION", "30"))
JOBS = int(os.environ.get("JOBS", str(max(1, NODES // 10))))
PORT = 18501
BASE = f"http://127.0.0.1:{PORT}"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def wrk(token, org, seconds):
    """wrk's p50 and p99 in ms and its rate, for a page of the tenant's orders."""
    out = subprocess.run(["wrk", "-t1", "-c8", f"-d{seconds}s", "--latency",
                          "-H", f"Authorization: Bearer {token}",
                          f"{BASE}/api/v1/orgs/{org}/orders?limit=20"],
                         capture_output=True, text=True, check=True).stdout

    def ms(label):
        found = re.search(rf"^\s+{label}\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        value, unit = float(found.group(1)), found.group(2)
        return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    return ms("50%"), ms("99%"), rate


def catalog(op):
    admin = f"{BASE}/api/v1/admin"
    call("POST", f"{admin}/catalog/regions", op, {"name": "swarm", "display_name": "Swarm", "time_zone": "UTC"})
    kind = call("POST", f"{admin}/catalog/instance-types", op,
                {"name": "swarm-h100x1", "gpu_model": "H100-SXM-80GB", "gpus_per_node": 1,
                 "vcpus": 12, "memory_gib": 100})
    call("POST", f"{admin}/catalog/instance-types/{kind['id']}/prices", op,
         {"pricing_class": "on_demand", "hourly_micros": 2_000_000})
    return call("POST", f"{admin}/join-tokens", op, {"region": "swarm"})["token"]


def main():
    subprocess.run(["psql", "-q", ADMIN, "-c", "DROP DATABASE IF EXISTS gantry_swarm WITH (FORCE)",
                    "-c", "CREATE DATABASE gantry_swarm"], check=True)
    env = dict(os.environ, DATABASE_URL=ADMIN.rsplit("/", 1)[0] + "/gantry_swarm",
               GANTRY_DATA_DIR=tempfile.mkdtemp(), GANTRY_LISTEN=f"127.0.0.1:{PORT}",
               GANTRY_JWT_SECRET="swarm-bench-secret-0123456789abcdef0123",
               GANTRY_RATE_LIMIT_PER_SECOND="1000000", GANTRY_RATE_LIMIT_BURST="1000000",
               GANTRY_MAX_WAITING_ORDERS=str(JOBS + 100), RUST_LOG="warn")
    server = subprocess.Popen([BIN, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    swarm = None
    try:
        ready(BASE)
        op = login(BASE, "operator@demo.gantry.dev", "gantry operator demo")
        tenant = login(BASE, "tenant@demo.gantry.dev", "gantry tenant demo")
        org = call("GET", f"{BASE}/api/v1/me", tenant)["memberships"][0]["organization"]["id"]
        call("PUT", f"{BASE}/api/v1/admin/orgs/{org}/quotas", op, {"quotas": []})
        token = catalog(op)
        idle = wrk(tenant, org, DURATION)
        swarm = subprocess.Popen([SWARM, "--server", BASE, "--join-token", token, "--nodes", str(NODES),
                                  "--seconds", str(DURATION)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in swarm.stderr:
            print(line.strip(), flush=True)
            if line.startswith("measuring"):
                break
        else:
            sys.exit(f"the swarm ended before measuring: {swarm.stdout.read()}")
        began, cpu_began = time.monotonic(), cpu_seconds(server.pid)
        body = {"instance_type": "swarm-h100x1", "region": "swarm", "duration_seconds": 1,
                "job": {"command": "train"}}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            submitted = pool.submit(lambda: list(pool.map(
                lambda _: call("POST", f"{BASE}/api/v1/orgs/{org}/orders", tenant, body), range(JOBS))))
            busy = wrk(tenant, org, max(1, DURATION - 2))
            submitted.result()
        cpu = (cpu_seconds(server.pid) - cpu_began) / (time.monotonic() - began)
        rss = rss_mib(server.pid)
        result = json.loads(swarm.stdout.read())
        swarm.wait()
    finally:
        if swarm and swarm.poll() is None:
            swarm.kill()
        server.terminate()
        server.wait()
    heartbeat = result["heartbeat_ms"]
    report = result["report_ms"] or {"p99": float("nan")}
    print("| nodes | heartbeats/s | heartbeat p50 / p99 | report p99 | server CPU (cores) | per 1,000 nodes "
          "| server RSS | tenant GET p50 / p99, idle | the same under the swarm | jobs started / ended |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {result['nodes']:,} | {result['heartbeats'] / DURATION:,.0f} "
          f"| {heartbeat['p50']:.1f} / {heartbeat['p99']:.1f} ms | {report['p99']:.1f} ms "
          f"| {cpu:.2f} | {cpu * 1000 / max(1, result['nodes']):.3f} | {rss:,.0f} MiB "
          f"| {idle[0]:.1f} / {idle[1]:.1f} ms ({idle[2]:,.0f}/s) | {busy[0]:.1f} / {busy[1]:.1f} ms ({busy[2]:,.0f}/s) "
          f"| {result['workloads_started']} / {result['workloads_ended']} |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
