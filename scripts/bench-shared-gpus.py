#!/usr/bin/env python3
"""Shared GPUs beside whole ones, in one run on a release server with the
demo cluster and NODES more simulated 8×H100 nodes, half of them with every
GPU in MIG mode (seven 1g.10gb instances each):

  1. order-to-running latency, one order at a time, of a whole GPU
     (h100x1), a quarter GPU (h100-quarter) and a MIG instance
     (h100-mig-1g10gb);
  2. a burst of BURST orders of each kind at once: seconds until all run,
     and whether any GPU ended up over-committed (shares above one GPU, a
     MIG instance held twice).

    cargo build --release && scripts/bench-shared-gpus.py

GANTRY_BIN (default target/release/gantry), NODES (default 100), SINGLE
(default 100), BURST (default 400: what the whole-GPU nodes can run at
once), DATABASE_URL (default a fresh SQLite
file; a postgres:// URL names a database made afresh).
"""

import concurrent.futures
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_orders import call, login, parse_time, percentile, ready  # noqa: E402

BIN = os.environ.get("GANTRY_BIN", "target/release/gantry")
NODES = int(os.environ.get("NODES", "100"))
SINGLE = int(os.environ.get("SINGLE", "100"))
BURST = int(os.environ.get("BURST", "400"))
PORT = 18302
BASE = f"http://127.0.0.1:{PORT}"
KINDS = ("h100x1", "h100-quarter", "h100-mig-1g10gb")


def gantry():
    env = dict(os.environ, GANTRY_DATA_DIR=tempfile.mkdtemp(), GANTRY_LISTEN=f"127.0.0.1:{PORT}",
               GANTRY_JWT_SECRET="shared-gpus-bench-secret-0123456789abcdef",
               GANTRY_MAX_WAITING_ORDERS=str(10 * BURST),
               GANTRY_RATE_LIMIT_PER_SECOND="1000000", GANTRY_RATE_LIMIT_BURST="1000000",
               GANTRY_SIMULATED_PROVISION_MS="0", GANTRY_SIMULATED_STOP_MS="0",
               RUST_LOG="warn")
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        server, name = url.rsplit("/", 1)
        for sql in (f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"CREATE DATABASE {name}"):
            subprocess.run(["psql", f"{server}/postgres", "-qc", sql], check=True)
    else:
        env.pop("DATABASE_URL", None)
    return subprocess.Popen([BIN, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def add_nodes(operator):
    def add(i):
        body = {"name": f"bench-{i:04d}", "region": "us-east", "instance_type": "h100x8"}
        if i % 2:
            body["mig"] = {"profile": "1g.10gb", "instances": 7}
        call("POST", f"{BASE}/api/v1/admin/nodes", operator, body)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(add, range(NODES)))


def single(token, org, kind):
    orders = f"{BASE}/api/v1/orgs/{org}/orders"
    server_ms = []
    for _ in range(SINGLE):
        order = call("POST", orders, token, {"instance_type": kind})
        while order["status"] != "running":
            time.sleep(0.002)
            order = call("GET", f"{orders}/{order['id']}", token)
        server_ms.append((parse_time(order["started_at"]) - parse_time(order["created_at"])).total_seconds() * 1000)
        call("POST", f"{orders}/{order['id']}/cancel", token, {})
        while call("GET", f"{orders}/{order['id']}", token)["placement"]:
            time.sleep(0.005)
    return server_ms


def burst(token, org, kind):
    orders = f"{BASE}/api/v1/orgs/{org}/orders"
    began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        ids = list(pool.map(lambda _: call("POST", orders, token, {"instance_type": kind})["id"], range(BURST)))
    waiting = set(ids)
    while waiting:
        time.sleep(0.2)
        page = call("GET", f"{orders}?status=running&limit=200", token)
        running = {o["id"] for o in page["items"]}
        while page.get("next_cursor"):
            page = call("GET", f"{orders}?status=running&limit=200&cursor={page['next_cursor']}", token)
            running |= {o["id"] for o in page["items"]}
        waiting -= running
        if time.monotonic() - began > 600:
            raise SystemExit(f"{len(waiting)} {kind} orders never ran")
    return time.monotonic() - began, ids


def gpu_use(operator):
    """GPUs holding work, GPUs over one whole, MIG instances held twice."""
    used, over, held_twice, devices = 0, 0, 0, set()
    cursor = ""
    while True:
        page = call("GET", f"{BASE}/api/v1/admin/nodes?limit=200{cursor}", operator)
        for node in page["items"]:
            for gpu in node["gpus"]:
                used += bool(gpu["order_id"] or gpu["shares"])
                units = sum(s["units"] for s in gpu["shares"])
                if not gpu["mig_enabled"] and (units > 1000 or (units and gpu["order_id"])):
                    over += 1
                for device in (s["mig_device"] for s in gpu["shares"] if s["mig_device"]):
                    held_twice += device in devices
                    devices.add(device)
        if not page.get("next_cursor"):
            return used, over, held_twice
        cursor = f"&cursor={page['next_cursor']}"


def cancel_all(token, org, ids):
    orders = f"{BASE}/api/v1/orgs/{org}/orders"
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: call("POST", f"{orders}/{i}/cancel", token, {}), ids))


def main():
    server = gantry()
    try:
        ready(BASE)
        operator = login(BASE, "operator@demo.gantry.dev", "gantry operator demo")
        add_nodes(operator)
        tenant = login(BASE, "tenant@demo.gantry.dev", "gantry tenant demo")
        org = call("GET", f"{BASE}/api/v1/orgs", tenant)["items"][0]["id"]
        # The demo's quota would cap the bursts, not the scheduler.
        call("PUT", f"{BASE}/api/v1/admin/orgs/{org}/quotas", operator, {"quotas": []})
        print(f"{NODES} extra nodes ({NODES // 2} in MIG mode), SINGLE={SINGLE}, BURST={BURST}, "
              f"database={'postgres' if os.environ.get('DATABASE_URL', '').startswith('postgres') else 'sqlite'}")
        base_p50 = None
        for kind in KINDS:
            values = single(tenant, org, kind)
            p50 = statistics.median(values)
            base_p50 = base_p50 or p50
            print(f"order to running, {kind}: p50={p50:.1f} ms p95={percentile(values, 95):.1f} ms "
                  f"max={max(values):.1f} ms ({p50 / base_p50:.2f}× whole)", flush=True)
        base_s = None
        for kind in KINDS:
            seconds, ids = burst(tenant, org, kind)
            base_s = base_s or seconds
            used, over, twice = gpu_use(operator)
            print(f"burst of {BURST} {kind}: all running in {seconds:.1f} s ({seconds / base_s:.2f}× whole) "
                  f"on {used} GPUs; GPUs over one whole: {over}; MIG instances held twice: {twice}", flush=True)
            cancel_all(tenant, org, ids)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
