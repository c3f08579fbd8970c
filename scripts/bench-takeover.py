#!/usr/bin/env python3
"""Take-over at scale: a leader with NODES simulated nodes and a queue of
PENDING orders that cannot all run is killed with SIGKILL while a second
replica follows on the same PostgreSQL database; the time until that
replica's first scheduling decision is measured, split into the wait for
the lease to expire and the new leader's own start (its catch-up from the
change log on the copy it kept while it followed, and its first cycle).

    cargo build --release && scripts/bench-takeover.py

GANTRY_BIN (default target/release/gantry), GANTRY_BENCH_ADMIN_URL (default
postgres://postgres@127.0.0.1:5432/postgres; a database gantry_takeover is
made afresh there), NODES (default 10000), PENDING (default 100000) and any
GANTRY_* setting apply. The demo catalog is used; every order is one
h100x8 on one node, so NODES of them run and PENDING wait.
"""

import datetime
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_orders import call, fill, login, nodes, ready  # noqa: E402

BIN = os.environ.get("GANTRY_BIN", "target/release/gantry")
ADMIN = os.environ.get("GANTRY_BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
NODES = int(os.environ.get("NODES", "10000"))
PENDING = int(os.environ.get("PENDING", "100000"))
PORTS = (18201, 18202)

subprocess.run(["psql", "-q", ADMIN, "-c", "DROP DATABASE IF EXISTS gantry_takeover WITH (FORCE)",
                "-c", "CREATE DATABASE gantry_takeover"], check=True)
ENV = dict(os.environ, DATABASE_URL=ADMIN.rsplit("/", 1)[0] + "/gantry_takeover",
           GANTRY_JWT_SECRET="takeover-secret-0123456789abcdef0123456789",
           GANTRY_MAX_WAITING_ORDERS=str(PENDING + NODES),
           GANTRY_RATE_LIMIT_PER_SECOND="1000000", GANTRY_RATE_LIMIT_BURST="1000000",
           GANTRY_SIMULATED_PROVISION_MS="0", RUST_LOG="warn,gantry_scheduling=debug")
work = tempfile.mkdtemp()


def start(port):
    env = dict(ENV, GANTRY_DATA_DIR=tempfile.mkdtemp(), GANTRY_LISTEN=f"127.0.0.1:{port}")
    log = open(os.path.join(work, f"{port}.log"), "w")
    return subprocess.Popen([BIN, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)


def base(port):
    return f"http://127.0.0.1:{port}"


def stamp(line):
    text = re.sub(r"\x1b\[[0-9;]*m", "", line).split()[0]
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


leader = start(PORTS[0])
ready(base(PORTS[0]))
follower = None
try:
    operator = login(base(PORTS[0]), "operator@demo.gantry.dev", "gantry operator demo")
    tenant = login(base(PORTS[0]), "tenant@demo.gantry.dev", "gantry tenant demo")
    org = call("GET", f"{base(PORTS[0])}/api/v1/me", tenant)["memberships"][0]["organization"]["id"]
    # No quota: every order is the engine's to place or keep waiting.
    call("PUT", f"{base(PORTS[0])}/api/v1/admin/orgs/{org}/quotas", operator, {"quotas": []})
    began = time.monotonic()
    nodes(base(PORTS[0]), operator, NODES)
    fill(base(PORTS[0]), tenant, org, PENDING + NODES)
    print(f"filled in {time.monotonic() - began:.0f} s", flush=True)
    follower = start(PORTS[1])
    ready(base(PORTS[1]))
    # The leader places what fits; the queue settles before the kill.
    time.sleep(20)
    killed = time.time()
    leader.kill()
    leader.wait()
    log = os.path.join(work, f"{PORTS[1]}.log")
    led = decided = None
    while decided is None and time.time() - killed < 300:
        for line in open(log, encoding="utf-8", errors="replace"):
            if "now runs the scheduling loop" in line:
                led = stamp(line)
            elif led is not None and "cycle timing" in line:
                decided = stamp(line)
                cycle = dict(re.findall(r"(\w+)=([\d.]+)", re.sub(r"\x1b\[[0-9;]*m", "", line)))
                break
        time.sleep(0.05)
    if decided is None:
        raise SystemExit("the follower made no decision within 300 s")
    print(f"killed -> lease taken: {led - killed:.2f} s; lease taken -> first decision: "
          f"{decided - led:.2f} s; killed -> first decision: {decided - killed:.2f} s")
    print(f"first cycle: pending={cycle['pending']} running={cycle['running']} nodes={cycle['nodes']} "
          f"load={float(cycle['load_ms']):.0f} decide={float(cycle['decide_ms']):.0f} "
          f"write={float(cycle['write_ms']):.0f} total={float(cycle['total_ms']):.0f} ms")
finally:
    for replica in (leader, follower):
        if replica is not None:
            replica.kill()
