#!/usr/bin/env python3
"""The job stream through a Slurm region, beside Slurm alone (standard library only).

  bench_slurm_region.py slurm BASE_DIR SLURM_CONF NODES JOBS
  bench_slurm_region.py gantry BASE OPERATOR_TOKEN TENANT_TOKEN ORG DB SLURM_CONF OUTPUT_DIR NODES JOBS

`slurm`: JOBS one-second jobs (`sleep 1`, `--time=1`) submitted by `sbatch`
one at a time, in the peer benchmark's order (job i by (i * 37) % 100: 40 %
1 GPU, 25 % 2, 20 % 4, 10 % 8 exclusive, 5 % two nodes of 8), timed from
the first submission to the last end that Slurm's accounting records.

`gantry`: the same jobs over REST (scripts/bench_jobs.py's stream) into a
region whose nodes are the same Slurm cluster's partition, timed from the
first submission to the last job Gantry records as ended.
"""
import os
import subprocess
import sys
import time

from bench_jobs import catalog, peer_shape, run
from bench_orders import call

GPUS = {"h100x1": 1, "h100x2": 2, "h100x4": 4, "h100x8": 8}


def slurm(conf, *args):
    env = dict(os.environ, SLURM_CONF=conf, SLURM_TIME_FORMAT="%s")
    return subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout


def slurm_alone(out_dir, conf, nodes, jobs):
    first = time.time()
    for i in range(jobs):
        kind, count = peer_shape(i)
        gpus = GPUS[kind]
        args = ["sbatch", "--parsable", f"--job-name=alone-{i}", "--partition=gpu", f"--nodes={count}",
                f"--gres=gpu:h100:{gpus}", "--time=1", f"--output={out_dir}/alone.out", "--wrap=sleep 1"]
        if gpus == 8:
            args.append("--exclusive")
        slurm(conf, *args)
    submitted = time.time()
    deadline = time.time() + 900
    while time.time() < deadline and slurm(conf, "squeue", "--noheader", "--format=%i").strip():
        time.sleep(0.5)
    # Accounting may trail the controller by a moment.
    for _ in range(60):
        rows = [line.split("|") for line in slurm(
            conf, "sacct", "--allocations", "--noheader", "--parsable2", "--starttime=now-2hours",
            "--format=JobName,State,Start,End").splitlines()]
        rows = [r for r in rows if r[0].startswith("alone-")]
        if len(rows) == jobs and all(r[1] == "COMPLETED" and r[3].isdigit() for r in rows):
            break
        time.sleep(1)
    end = max(int(r[3]) for r in rows)
    completed = sum(r[1] == "COMPLETED" for r in rows)
    print(f"cluster: {nodes} nodes x 8 GPUs; jobs: {jobs} of 1 s; completed {completed}")
    print(f"submission: {submitted - first:.1f} s, {jobs / (submitted - first):.0f} jobs/s accepted")
    print(f"first submission -> all completed: {end - first:.1f} s")


def gantry(base, op, token, org, db, conf, out_dir, nodes, jobs):
    catalog(base, op, nodes, simulated=False)
    call("PUT", f"{base}/api/v1/admin/slurm-clusters", op,
         {"region": "bench", "partition": "gpu", "account": "gantry", "conf_path": conf,
          "output_dir": out_dir, "gres_types": {"H100": "h100"}, "users": "shared"})
    deadline = time.time() + 60
    while time.time() < deadline:
        ready = [n for n in call("GET", f"{base}/api/v1/admin/nodes?limit=200", op)["items"] if n["state"] == "ready"]
        if len(ready) == nodes:
            break
        time.sleep(0.2)
    else:
        sys.exit("the Slurm partition's nodes did not come in")
    run(base, token, org, db, nodes, jobs, True)


def main():
    if sys.argv[1] == "slurm":
        out_dir, conf, nodes, jobs = sys.argv[2:6]
        slurm_alone(out_dir, conf, int(nodes), int(jobs))
    else:
        base, op, token, org, db, conf, out_dir, nodes, jobs = sys.argv[2:11]
        gantry(base, op, token, org, db, conf, out_dir, int(nodes), int(jobs))


if __name__ == "__main__":
    main()
