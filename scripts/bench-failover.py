#!/usr/bin/env python3
"""How long two replicas on one PostgreSQL database go without a scheduler:
the leader is killed with SIGKILL at a random moment, and the time until the
other replica leads is measured, ROUNDS times (the killed one comes back as
the follower each round).

    cargo build --release && scripts/bench-failover.py

GANTRY_BIN (default target/release/gantry), GANTRY_BENCH_ADMIN_URL (default
postgres://postgres@127.0.0.1:5432/postgres; a database gantry_failover is
made afresh there), ROUNDS (default 8) and any GANTRY_* setting, such as
GANTRY_SCHEDULER_LEASE_SECONDS, apply.
"""

import json
import os
import random
import subprocess
import tempfile
import time
import urllib.request

BIN = os.environ.get("GANTRY_BIN", "target/release/gantry")
ADMIN = os.environ.get("GANTRY_BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
ROUNDS = int(os.environ.get("ROUNDS", "8"))
PORTS = (18101, 18102)
PASSWORD = "failover correct horse"

subprocess.run(["psql", "-q", ADMIN, "-c", "DROP DATABASE IF EXISTS gantry_failover WITH (FORCE)",
                "-c", "CREATE DATABASE gantry_failover"], check=True)
ENV = dict(os.environ, DATABASE_URL=ADMIN.rsplit("/", 1)[0] + "/gantry_failover", GANTRY_DEMO="false",
           GANTRY_JWT_SECRET="failover-secret-0123456789abcdef0123456789")


def start(port):
    data = tempfile.mkdtemp()
    env = dict(ENV, GANTRY_DATA_DIR=data, GANTRY_LISTEN=f"127.0.0.1:{port}")
    return subprocess.Popen([BIN, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def call(port, path, body=None, token=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                     data=json.dumps(body).encode() if body else None,
                                     headers={"content-type": "application/json"})
    if token:
        request.add_header("authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=2) as reply:
        return json.load(reply)


def ready(port):
    for _ in range(400):
        try:
            call(port, "/readyz")
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the replica on {port} did not become ready")


def leading(port, token):
    try:
        return call(port, "/api/v1/admin/scheduler", token=token)["leading"]
    except OSError:
        return False


# One after the other: the first applies the migrations.
replicas = {}
for port in PORTS:
    replicas[port] = start(port)
    ready(port)
account = {"email": "operator@example.com", "password": PASSWORD}
call(PORTS[0], "/api/v1/auth/signup", dict(account, name="Operator", organization="Operator"))
subprocess.run([BIN, "admin", "create-operator", "--email", account["email"], "--password", PASSWORD],
               env=ENV, check=True, stdout=subprocess.DEVNULL)
token = call(PORTS[0], "/api/v1/auth/login", account)["access_token"]
took = []
try:
    for round_ in range(ROUNDS):
        leader = None
        while leader is None:
            leader = next((p for p in PORTS if leading(p, token)), None)
            time.sleep(0.05)
        follower = PORTS[1] if leader == PORTS[0] else PORTS[0]
        time.sleep(random.random())
        killed = time.monotonic()
        replicas[leader].kill()
        replicas[leader].wait()
        while not leading(follower, token):
            time.sleep(0.02)
        took.append(time.monotonic() - killed)
        print(f"round {round_ + 1}: {took[-1]:.2f} s", flush=True)
        replicas[leader] = start(leader)
        ready(leader)
finally:
    for replica in replicas.values():
        replica.kill()
print(f"take-over after SIGKILL: min {min(took):.2f} s, mean {sum(took) / len(took):.2f} s, "
      f"max {max(took):.2f} s over {len(took)} rounds")
