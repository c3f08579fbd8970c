#!/usr/bin/env python3
"""One leader at fleet and queue size: for each row (NODES simulated
h100x8 nodes, each running one whole-node order, and WAITING more whole-node
orders that cannot run), on a fresh PostgreSQL database and a release
server:

  - one arrival's decision: an h100x1 order in a second region with room
    (eight more nodes there), from its creation to running on the simulated
    driver (server clock, provisioning delay 0), 20 one after another;
  - order intake: wrk, 2 threads, 32 connections, DURATION, POST h100x1
    orders into that region (they fill its room, then wait too);
  - the scheduling cycles during the intake: p50 and p99 of all, and of
    those that planned the whole queue;
  - the leader's resident memory after the intake;
  - pgbench's single-row INSERT rate on the same server with the same
    clients, right after, as the database's own limit in this run.

    cargo build --release && scripts/bench-scale.py

ROWS (default "1000x0,1000x10000,1000x100000,10000x0,10000x10000,10000x100000"),
DURATION (default 15), GANTRY_BIN (default target/release/gantry) and
GANTRY_BENCH_ADMIN_URL (default postgres://postgres@127.0.0.1:5432/postgres;
a database gantry_scale is made afresh there for each row). The queue is
seeded in the database as copies of one order made over the API (the
triggers that log changes run as for any insert); the API's own intake is
what wrk measures.
"""

import concurrent.futures
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_orders import call, login, parse_time, percentile, ready  # noqa: E402

BIN = os.environ.get("GANTRY_BIN", "target/release/gantry")
ADMIN = os.environ.get("GANTRY_BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres")
DB = ADMIN.rsplit("/", 1)[0] + "/gantry_scale"
ROWS = [tuple(int(x) for x in row.split("x")) for row in
        os.environ.get("ROWS", "1000x0,1000x10000,1000x100000,10000x0,10000x10000,10000x100000").split(",")]
DURATION = int(os.environ.get("DURATION", "15"))
PORT = 18301
BASE = f"http://127.0.0.1:{PORT}"
WAITING_REGION, ROOM_REGION = "us-east", "eu-central"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def psql(database, sql):
    out = subprocess.run(["psql", "-qAt", database, "-c", sql], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def add_nodes(token, count, region, prefix):
    def add(i):
        call("POST", f"{BASE}/api/v1/admin/nodes", token,
             {"name": f"{prefix}-{i:05d}", "region": region, "instance_type": "h100x8"})
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(add, range(count)))


def seed(org, template, copies):
    """Copies the order `template` `copies` times, in batches of 10,000."""
    columns = psql(DB, "SELECT string_agg(column_name, ',' ORDER BY ordinal_position) "
                       "FROM information_schema.columns WHERE table_name = 'orders'").split(",")
    # As the template was made, whatever the loop did with it since.
    chosen = {"id": "gen_random_uuid()", "status": "'queued'", "started_at": "NULL",
              "ended_at": "NULL", "pending_reason": "NULL", "pending_details": "NULL",
              "estimated_start": "NULL", "estimate_confidence": "NULL", "attempts": "0",
              "idempotency_key": "NULL",
              "created_at": "o.created_at + g * interval '1 millisecond'",
              "updated_at": "o.created_at + g * interval '1 millisecond'"}
    select = ",".join(chosen.get(c, f"o.{c}") for c in columns)
    done = 0
    while done < copies:
        batch = min(10_000, copies - done)
        psql(DB, f"INSERT INTO orders ({','.join(columns)}) SELECT {select} FROM orders o, "
                 f"generate_series({done + 1}, {done + batch}) g WHERE o.id = '{template}'")
        done += batch


def cycles(log, start, end):
    """The cycle timings logged between byte offsets `start` and `end`."""
    rows = []
    with open(log, encoding="utf-8", errors="replace") as f:
        f.seek(start)
        for line in f.read(end - start).splitlines():
            if "cycle timing" in line:
                text = ANSI.sub("", line)
                fields = dict(re.findall(r'(\w+)="?([\w.]+)', text))
                rows.append(fields)
    return rows


def quantiles(values):
    if not values:
        return "n/a"
    return f"{statistics.median(values):.0f} / {percentile(values, 99):.0f}"


def wait_settled(log, waiting, timeout=1800):
    """Waits until a cycle shows at least `waiting` orders waiting and the
    queue stops moving for 5 s."""
    began = time.monotonic()
    last, still = None, 0.0
    while time.monotonic() - began < timeout:
        size = os.path.getsize(log)
        rows = cycles(log, max(0, size - 200_000), size)
        if rows:
            seen = (rows[-1].get("pending"), rows[-1].get("running"))
            if int(seen[0] or 0) >= waiting and seen == last:
                still += 1
                if still >= 5:
                    return
            else:
                still = 0
            last = seen
        time.sleep(1)
    raise SystemExit(f"the queue did not settle at {waiting} waiting")


def row(nodes, waiting, work):
    subprocess.run(["psql", "-q", ADMIN, "-c", "DROP DATABASE IF EXISTS gantry_scale WITH (FORCE)",
                    "-c", "CREATE DATABASE gantry_scale"], check=True)
    log = os.path.join(work, f"server-{nodes}-{waiting}.log")
    env = dict(os.environ, DATABASE_URL=DB, GANTRY_DATA_DIR=tempfile.mkdtemp(dir=work),
               GANTRY_LISTEN=f"127.0.0.1:{PORT}",
               GANTRY_JWT_SECRET="scale-secret-0123456789abcdef0123456789abcdef",
               GANTRY_MAX_WAITING_ORDERS=str(waiting + nodes + 1_000_000),
               GANTRY_RATE_LIMIT_PER_SECOND="10000000", GANTRY_RATE_LIMIT_BURST="10000000",
               GANTRY_SIMULATED_PROVISION_MS="0", RUST_LOG="warn,gantry_scheduling=debug")
    server = subprocess.Popen([BIN, "serve"], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        ready(BASE)
        operator = login(BASE, "operator@demo.gantry.dev", "gantry operator demo")
        tenant = login(BASE, "tenant@demo.gantry.dev", "gantry tenant demo")
        org = call("GET", f"{BASE}/api/v1/me", tenant)["memberships"][0]["organization"]["id"]
        call("PUT", f"{BASE}/api/v1/admin/orgs/{org}/quotas", operator, {"quotas": []})
        add_nodes(operator, nodes, WAITING_REGION, "scale")
        add_nodes(operator, 8, ROOM_REGION, "room")
        template = call("POST", f"{BASE}/api/v1/orgs/{org}/orders", tenant,
                        {"instance_type": "h100x8", "region": WAITING_REGION})["id"]
        # The demo cluster's own H100 nodes in that region take a few more.
        seed(org, template, nodes + waiting + 64)
        wait_settled(log, waiting)

        orders = f"{BASE}/api/v1/orgs/{org}/orders"
        decided = []
        for _ in range(20):
            order = call("POST", orders, tenant, {"instance_type": "h100x1", "region": ROOM_REGION})
            while order["status"] != "running":
                time.sleep(0.002)
                order = call("GET", f"{orders}/{order['id']}", tenant)
            decided.append((parse_time(order["started_at"]) - parse_time(order["created_at"])).total_seconds() * 1000)
            call("POST", f"{orders}/{order['id']}/cancel", tenant, {})
            while call("GET", f"{orders}/{order['id']}", tenant)["placement"]:
                time.sleep(0.005)
            # The release is a change the next cycle plans the whole queue
            # for; the next arrival comes after it.
            time.sleep(1.5)

        script = os.path.join(work, "order.lua")
        with open(script, "w") as f:
            f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                    f'wrk.headers["Authorization"] = "Bearer {tenant}"\n'
                    f'wrk.body = \'{{"instance_type":"h100x1","region":"{ROOM_REGION}"}}\'\n')
        mark = os.path.getsize(log)
        out = subprocess.run(["wrk", "-t2", "-c32", f"-d{DURATION}s", "--latency", "-s", script, orders],
                             check=True, capture_output=True, text=True).stdout
        during = cycles(log, mark, os.path.getsize(log))
        rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        p99 = re.search(r"99%\s+([\d.]+)(\w+)", out)
        p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[p99.group(2)]
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        with open(f"/proc/{server.pid}/status") as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
        server.kill()
        server.wait()

        psql(DB, "CREATE TABLE pgbench_rows (id bigserial PRIMARY KEY, org uuid NOT NULL, body text NOT NULL, "
                 "created_at timestamptz NOT NULL DEFAULT now())")
        script = os.path.join(work, "insert.sql")
        with open(script, "w") as f:
            f.write(f"INSERT INTO pgbench_rows (org, body) VALUES ('{org}', '{{\"instance_type\":\"h100x1\"}}');\n")
        out = subprocess.run(["pgbench", "-n", "-c", "32", "-j", "2", "-T", str(DURATION), "-f", script, DB],
                             check=True, capture_output=True, text=True).stdout
        tps = float(re.search(r"tps = ([\d.]+)", out).group(1))

        total = [float(c["total_ms"]) for c in during]
        whole = [float(c["total_ms"]) for c in during if c.get("planned") == "whole"]
        kinds = {k: sum(1 for c in during if c.get("planned") == k) for k in ("whole", "arrivals", "nothing")}
        return {
            "rate": rate, "p99": p99_ms, "errors": int(errors.group(1)) if errors else 0,
            "cycles": quantiles(total), "whole": quantiles(whole), "kinds": kinds,
            "arrival": f"{statistics.median(decided):.1f} / {max(decided):.1f}",
            "rss": rss, "tps": tps,
        }
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def main():
    work = tempfile.mkdtemp()
    results = []
    for nodes, waiting in ROWS:
        began = time.monotonic()
        result = row(nodes, waiting, work)
        results.append(((nodes, waiting), result))
        print(f"{nodes} nodes, {waiting} waiting: {result} ({time.monotonic() - began:.0f} s)", flush=True)
    subprocess.run(["psql", "-q", ADMIN, "-c", "DROP DATABASE IF EXISTS gantry_scale WITH (FORCE)"], check=True)
    empty = {nodes: r["rate"] for (nodes, waiting), r in results if waiting == 0}
    print()
    print("| nodes | waiting | intake orders/s (p99 ms) | × empty queue | cycle p50 / p99 ms (whole plans) "
          "| cycles whole / arrivals / nothing | arrival decided p50 / max ms | leader RSS MiB | pgbench tps | intake ÷ pgbench |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (nodes, waiting), r in results:
        ratio = f"{r['rate'] / empty[nodes]:.2f}" if nodes in empty else "n/a"
        k = r["kinds"]
        print(f"| {nodes:,} | {waiting:,} | {r['rate']:,.0f} ({r['p99']:.0f}) | {ratio} | {r['cycles']} ({r['whole']}) "
              f"| {k['whole']} / {k['arrivals']} / {k['nothing']} | {r['arrival']} | {r['rss']:,.0f} "
              f"| {r['tps']:,.0f} | {100 * r['rate'] / r['tps']:.1f} % |")


if __name__ == "__main__":
    main()
