#!/usr/bin/env python3
"""Reservations under load: how long confirming one takes (the engine plans
its exact GPUs against every running order and every other reservation),
quoting one and reading a week's availability, on a release server with
the demo cluster and NODES more simulated 8-GPU nodes, half of them running
two-hour orders and PENDING more waiting; and how much a stream of reservations slows order
creation beside it. With SLURM_PEER_DIR set, the same number of
`scontrol create reservation` calls on Slurm 22.05 with SLURM_NODES
emulated nodes are timed in the same run.

    cargo build --release && scripts/bench-reservations.py

GANTRY_BIN (default target/release/gantry), NODES (default 1000), PENDING
(default 5000), RESERVATIONS (default 100), DATABASE_URL (default a fresh
SQLite file; a postgres:// URL names a database made afresh),
SLURM_NODES (default 16).
"""

import concurrent.futures
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_orders import call, login, percentile, ready  # noqa: E402

BIN = os.environ.get("GANTRY_BIN", "target/release/gantry")
NODES = int(os.environ.get("NODES", "1000"))
PENDING = int(os.environ.get("PENDING", "5000"))
RESERVATIONS = int(os.environ.get("RESERVATIONS", "100"))
SLURM_NODES = int(os.environ.get("SLURM_NODES", "16"))
PORT = 18301
BASE = f"http://127.0.0.1:{PORT}"


def summary(name, values):
    print(f"{name}: n={len(values)} p50={statistics.median(values):.1f} ms "
          f"p99={percentile(values, 99):.1f} ms max={max(values):.1f} ms", flush=True)


def timed(fn):
    began = time.monotonic()
    fn()
    return (time.monotonic() - began) * 1000


def iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def gantry():
    env = dict(os.environ, GANTRY_DATA_DIR=tempfile.mkdtemp(), GANTRY_LISTEN=f"127.0.0.1:{PORT}",
               GANTRY_JWT_SECRET="reservations-bench-secret-0123456789abcdef",
               GANTRY_MAX_WAITING_ORDERS=str(10 * (NODES + PENDING)),
               GANTRY_RATE_LIMIT_PER_SECOND="1000000", GANTRY_RATE_LIMIT_BURST="1000000",
               GANTRY_SIMULATED_PROVISION_MS="0", RUST_LOG="warn")
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("postgres"):
        admin = url.rsplit("/", 1)[0] + "/postgres"
        subprocess.run(["psql", "-q", admin, "-c", "DROP DATABASE IF EXISTS gantry_reservations WITH (FORCE)",
                        "-c", "CREATE DATABASE gantry_reservations"], check=True)
        env["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/gantry_reservations"
    else:
        env.pop("DATABASE_URL", None)
    server = subprocess.Popen([BIN, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        ready(BASE)
        operator = login(BASE, "operator@demo.gantry.dev", "gantry operator demo")
        tenant = login(BASE, "tenant@demo.gantry.dev", "gantry tenant demo")
        org = call("GET", f"{BASE}/api/v1/me", tenant)["memberships"][0]["organization"]["id"]
        call("PUT", f"{BASE}/api/v1/admin/orgs/{org}/quotas", operator, {"quotas": []})
        orders = f"{BASE}/api/v1/orgs/{org}/orders"
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: call("POST", f"{BASE}/api/v1/admin/nodes", operator,
                                         {"name": f"bench-{i:05d}", "region": "us-east",
                                          "instance_type": "h100x8"}), range(NODES)))
            list(pool.map(lambda _: call("POST", orders, tenant,
                                         {"instance_type": "h100x8", "region": "us-east",
                                          "duration_seconds": 7200}), range(NODES // 2 + PENDING)))
        time.sleep(10)
        engine = "PostgreSQL" if "DATABASE_URL" in env else "SQLite"
        print(f"== Gantry on {engine}: {NODES} nodes beside the demo's, {NODES // 2} running and "
              f"{PENDING} waiting two-hour orders", flush=True)
        reservations = f"{BASE}/api/v1/orgs/{org}/reservations"
        day = datetime.datetime.now(datetime.timezone.utc).replace(minute=0, second=0, microsecond=0) \
            + datetime.timedelta(days=1)

        def ask(i):
            start = day + datetime.timedelta(hours=i % 48)
            return {"instance_type": "h100x8", "region": "us-east", "count": 1,
                    "starts_at": iso(start), "ends_at": iso(start + datetime.timedelta(hours=4))}

        quotes = [timed(lambda i=i: call("POST", f"{reservations}/quote", tenant, ask(i))) for i in range(20)]
        week = f"{reservations}/availability?instance_type=h100x8&region=us-east&hours=168"
        weeks = [timed(lambda: call("GET", week, tenant)) for _ in range(10)]

        baseline = []
        for _ in range(100):
            baseline.append(timed(lambda: call("POST", orders, tenant, {"instance_type": "h100x1"})))
        beside, stop = [], threading.Event()

        def stream():
            while not stop.is_set():
                beside.append(timed(lambda: call("POST", orders, tenant, {"instance_type": "h100x1"})))
                time.sleep(0.01)

        streamer = threading.Thread(target=stream)
        streamer.start()
        made = [timed(lambda i=i: call("POST", reservations, tenant, ask(i))) for i in range(RESERVATIONS)]
        stop.set()
        streamer.join()
        summary("reservation confirmed (POST …/reservations)", made)
        summary("quote (POST …/reservations/quote)", quotes)
        summary("a week's availability (GET …/reservations/availability)", weeks)
        summary("order creation, alone", baseline)
        summary("order creation, beside the reservations", beside)
        return statistics.median(made)
    finally:
        server.kill()


def slurm():
    peer = os.environ.get("SLURM_PEER_DIR")
    if not peer:
        return None
    root = tempfile.mkdtemp(prefix="slurm-")
    env = dict(os.environ, SP_ROOT=root)
    subprocess.run([f"{peer}/run_slurm_peer.sh", str(SLURM_NODES)], check=True, stdout=subprocess.DEVNULL,
                   env=env)
    try:
        print(f"== Slurm 22.05: {SLURM_NODES} nodes x 8 GPUs", flush=True)
        made = []
        for i in range(RESERVATIONS):
            made.append(timed(lambda i=i: subprocess.run(
                [f"{root}/bin/sp", "scontrol", "create", "reservation", f"ReservationName=bench{i}",
                 f"StartTime=now+{1440 + 60 * (i % 48)}minutes", "Duration=240", "NodeCnt=1",
                 "Users=root", "PartitionName=gpu"], check=True, stdout=subprocess.DEVNULL, env=env)))
        summary("reservation confirmed (scontrol create reservation)", made)
        return statistics.median(made)
    finally:
        subprocess.run([f"{peer}/stop_slurm_peer.sh"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=env)


slurm_ms = slurm()
gantry_ms = gantry()
if slurm_ms is not None:
    print(f"== same run: median reservation round trip Gantry {gantry_ms:.1f} ms ({NODES} + demo nodes), "
          f"Slurm {slurm_ms:.1f} ms ({SLURM_NODES} nodes): Gantry / Slurm {gantry_ms / slurm_ms:.2f}")
