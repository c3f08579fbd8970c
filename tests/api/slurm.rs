//! A region run by a real Slurm 22.05 cluster (`scripts/test-slurm.sh`:
//! slurmctld, slurmdbd on MariaDB, one slurmd per emulated 8-GPU node):
//! the operator declares it and its nodes come in; jobs and instances run
//! pinned to the nodes Gantry chose, with the GPU indices Slurm bound;
//! output, exit codes, walltimes and cancels come back; a drain in Slurm
//! cordons the node in Gantry; work Slurm runs for others shows as outside
//! capacity; each attempt's times equal Slurm's accounting; and each
//! organization's jobs run as its own Unix user, so another tenant's job
//! can neither see, cancel nor read them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::slurm::{SlurmCluster, UnixUsers};
use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(a_slurm_region_runs_what_gantry_places);

/// Polls `path` until `done` holds, for up to two minutes: Slurm is read
/// every second, a job's start and end each take a read, and a submission
/// Slurm did not answer is tried again after 40 s.
async fn until(
    server: &TestServer,
    token: &str,
    path: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..1200 {
        let reply = server.get(path, token).await;
        if reply.status == StatusCode::OK && done(&reply.body) {
            return reply.body;
        }
        last = reply.body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what} never happened; last seen: {last:#}");
}

async fn order_until(server: &TestServer, tenant: &Tenant, id: &str, status: &str) -> Value {
    let path = format!("/api/v1/orgs/{}/orders/{id}", tenant.org_id);
    until(server, &tenant.token, &path, status, |o| {
        o["status"] == status
    })
    .await
}

async fn place(server: &TestServer, tenant: &Tenant, body: Value) -> String {
    let reply = server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            body,
        )
        .await;
    reply.expect(StatusCode::CREATED);
    reply.str("/id")
}

async fn attempts(server: &TestServer, tenant: &Tenant, id: &str) -> Value {
    server
        .get(
            &format!("/api/v1/orgs/{}/orders/{id}/attempts", tenant.org_id),
            &tenant.token,
        )
        .await
        .body
}

async fn output(server: &TestServer, tenant: &Tenant, id: &str) -> String {
    let logs = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{id}/logs", tenant.org_id),
            &tenant.token,
        )
        .await;
    logs.body["lines"]
        .as_array()
        .map(|lines| {
            lines
                .iter()
                .filter_map(|l| l["line"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

async fn a_slurm_region_runs_what_gantry_places(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.scheduler_interval_ms = 200;
        config.metering_interval_seconds = 1;
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let slurm = SlurmCluster::start(2);
    let op = &operator.token;

    // Bad declarations name their field and change nothing.
    let good = json!({
        "region": "r2", "partition": "gpu", "account": "gantry",
        "conf_path": slurm.conf, "output_dir": slurm.output_dir(),
        "gres_types": { "H100": "h100" },
        "users": "per_organization", "user_prefix": "g",
    });
    for (field, value) in [
        ("partition", json!("--all")),
        ("account", json!("a;b")),
        ("login_host", json!("-oProxyCommand=touch /tmp/x")),
        ("output_dir", json!("relative/out")),
        ("gres_types", json!({ "B200": "b200" })),
        ("gres_types", json!({ "H100": "h100 --exclusive" })),
        ("user_prefix", json!("Root;")),
    ] {
        let mut bad = good.clone();
        bad[field] = value;
        let reply = server.put("/api/v1/admin/slurm-clusters", op, bad).await;
        reply.expect(StatusCode::UNPROCESSABLE_ENTITY);
        assert!(reply.body.to_string().contains(field), "{:#}", reply.body);
    }
    let tenant = server.signup("slurm-tenant").await;
    let mallory = server.signup("slurm-mallory").await;
    let users = UnixUsers::make("g", &[tenant.org_id, mallory.org_id]);
    let (user, mallory_user) = (users.0[0].clone(), users.0[1].clone());
    server
        .put("/api/v1/admin/slurm-clusters", &tenant.token, good.clone())
        .await
        .expect(StatusCode::FORBIDDEN);
    let none = server.get("/api/v1/admin/slurm-clusters", op).await;
    assert_eq!(none.body, json!([]));
    server
        .put("/api/v1/admin/slurm-clusters", op, good)
        .await
        .expect(StatusCode::OK);
    // The operator reads whom to make on the nodes.
    let listed = server
        .get("/api/v1/admin/slurm-clusters/r2/users?limit=200", op)
        .await;
    listed.expect(StatusCode::OK);
    let made: Vec<(String, String)> = listed.body["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            (
                u["org_id"].as_str().unwrap_or_default().to_owned(),
                u["user"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        made.contains(&(tenant.org_id.to_string(), user.clone())),
        "{made:?}"
    );
    assert!(made.contains(&(mallory.org_id.to_string(), mallory_user.clone())));
    server
        .get("/api/v1/admin/slurm-clusters/r2/users", &tenant.token)
        .await
        .expect(StatusCode::FORBIDDEN);
    server
        .get("/api/v1/admin/slurm-clusters/r1/users", op)
        .await
        .expect(StatusCode::NOT_FOUND);

    // The partition's nodes come in with their GPUs.
    let nodes = until(
        &server,
        op,
        "/api/v1/admin/nodes?region=r2",
        "import",
        |n| {
            n["items"].as_array().is_some_and(|items| {
                items.len() == 2 && items.iter().all(|i| i["state"] == "ready")
            })
        },
    )
    .await;
    let mut names: Vec<(String, String)> = nodes["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or_default().to_owned(),
                n["id"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    names.sort();
    for n in nodes["items"].as_array().into_iter().flatten() {
        assert_eq!(n["driver"], "slurm");
        assert_eq!(n["gpus"].as_array().map(Vec::len), Some(8), "{n:#}");
    }
    let (first, first_id) = names[0].clone();
    let second_id = names[1].1.clone();

    // Work someone else runs in Slurm holds two GPUs of the first node:
    // it shows as outside capacity.
    let outside = slurm.run(
        "sbatch",
        &[
            "--parsable",
            "--job-name=someone-else",
            &format!("--nodelist={first}"),
            "--gres=gpu:h100:2",
            &format!("--output={}/outside.out", slurm.output_dir()),
            "--wrap=sleep 600",
        ],
    );
    until(
        &server,
        op,
        "/api/v1/admin/slurm-clusters",
        "outside capacity",
        |c| c[0]["outside_gpus"][&first] == 2,
    )
    .await;

    // With the second node cordoned in Gantry, a 4-GPU job goes to the
    // first; Slurm binds the GPUs the outside job left, and Gantry's
    // attempt names those, read while it runs. Its words reach the job as
    // values only.
    server
        .post(
            &format!("/api/v1/admin/nodes/{second_id}/cordon"),
            op,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);
    let payload = "a'; touch /tmp/gantry-owned; echo $(id) `id` --help";
    let job = place(
        &server,
        &tenant,
        json!({
            "instance_type": "h100x4", "region": "r2",
            "job": {
                "command": "sleep 3; echo user=$(id -un) gpus=$CUDA_VISIBLE_DEVICES rank=$NODE_RANK master=$MASTER_ADDR; printf '%s\\n' \"$PAYLOAD\"",
                "env": { "PAYLOAD": payload },
            },
        }),
    )
    .await;
    order_until(&server, &tenant, &job, "completed").await;
    let done = attempts(&server, &tenant, &job).await;
    let gpus: Vec<String> = done[0]["nodes"][0]["gpu_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
    assert_eq!(done[0]["nodes"][0]["node_name"], first.as_str());
    assert_eq!(done[0]["exit_code"], 0);
    let said = output(&server, &tenant, &job).await;
    assert!(
        said.contains(&format!(
            "user={user} gpus={} rank=0 master={first}",
            gpus.join(",")
        )),
        "{said} (user {user}, GPUs {gpus:?})"
    );
    assert_eq!(gpus.len(), 4);
    assert!(
        !gpus.contains(&"0".to_owned()) && !gpus.contains(&"1".to_owned()),
        "{gpus:?}"
    );
    assert!(said.lines().any(|l| l == payload), "{said}");
    assert!(!Path::new("/tmp/gantry-owned").exists());

    // Its attempt's times are Slurm's accounting, to the second.
    let name = format!("--name=gantry-{}-1", job.replace('-', ""));
    // Accounting may trail the controller by a moment.
    let mut accounted = String::new();
    for _ in 0..100 {
        accounted = slurm.accounted(&[&name], "Start,End,State");
        if accounted.contains("COMPLETED") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fields: Vec<&str> = accounted.trim().split('|').collect();
    let epoch = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default())
            .map(|t| t.timestamp().to_string())
            .unwrap_or_default()
    };
    assert_eq!(fields[2], "COMPLETED");
    assert_eq!(epoch(&done[0]["started_at"]), fields[0]);
    assert_eq!(epoch(&done[0]["ended_at"]), fields[1]);

    // A failing command's exit code reaches Gantry.
    let failing = place(
        &server,
        &tenant,
        json!({ "instance_type": "h100x1", "region": "r2", "job": { "command": "exit 3" } }),
    )
    .await;
    let failed = order_until(&server, &tenant, &failing, "failed").await;
    assert_eq!(failed["job"]["exit_code"], 3, "{failed:#}");

    // The GPUs the outside job holds are taken for Gantry's engine too: a
    // whole-node job waits for capacity instead of queueing in Slurm.
    let node = server
        .get(&format!("/api/v1/admin/nodes/{first_id}"), op)
        .await;
    let held: Vec<&Value> = node.body["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["held_outside"] == true)
        .collect();
    assert_eq!(held.len(), 2, "{:#}", node.body);
    let whole = place(
        &server,
        &tenant,
        json!({ "instance_type": "h100x8", "region": "r2", "job": { "command": "echo whole" } }),
    )
    .await;
    let waiting = server
        .wait_reason(&tenant, whole.parse().expect("id"), "capacity")
        .await;
    assert_eq!(waiting["status"], "queued", "{waiting:#}");
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM slurm_jobs WHERE finished = false")
            .await,
        0
    );

    slurm.run("scancel", &[outside.trim()]);
    server
        .post(
            &format!("/api/v1/admin/nodes/{second_id}/uncordon"),
            op,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);
    until(
        &server,
        op,
        "/api/v1/admin/slurm-clusters",
        "outside work gone",
        |c| {
            c[0]["outside_gpus"]
                .as_object()
                .is_some_and(serde_json::Map::is_empty)
        },
    )
    .await;

    order_until(&server, &tenant, &whole, "completed").await;

    // A running job's output reaches its log while it runs, each line
    // once.
    let chatty = place(
        &server,
        &tenant,
        json!({
            "instance_type": "h100x1", "region": "r2",
            "job": { "command": "echo first; sleep 12; echo second >&2; echo third" },
        }),
    )
    .await;
    let logs = format!("/api/v1/orgs/{}/orders/{chatty}/logs", tenant.org_id);
    until(&server, &tenant.token, &logs, "output while it runs", |l| {
        l["lines"]
            .as_array()
            .is_some_and(|lines| lines.iter().any(|x| x["line"] == "first"))
    })
    .await;
    let meanwhile = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{chatty}", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(meanwhile.body["status"], "running", "{:#}", meanwhile.body);
    order_until(&server, &tenant, &chatty, "completed").await;
    let said = output(&server, &tenant, &chatty).await;
    let mut lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.first(), Some(&"first"), "{said}");
    lines.sort_unstable();
    assert_eq!(lines, ["first", "second", "third"], "{said}");

    // A gang of two whole nodes meets at its first node.
    let gang = place(
        &server,
        &tenant,
        json!({
            "instance_type": "h100x8", "region": "r2", "node_count": 2,
            "job": { "command": "echo rank=$NODE_RANK master=$MASTER_ADDR world=$WORLD_SIZE gpus=$CUDA_VISIBLE_DEVICES" },
        }),
    )
    .await;
    order_until(&server, &tenant, &gang, "completed").await;
    let said = output(&server, &tenant, &gang).await;
    let ran = attempts(&server, &tenant, &gang).await;
    let master = ran[0]["nodes"][0]["node_name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for rank in ["0", "1"] {
        assert!(
            said.contains(&format!(
                "rank={rank} master={master} world=2 gpus=0,1,2,3,4,5,6,7"
            )),
            "{said}"
        );
    }

    // Past its walltime a job is stopped in Slurm and times out.
    let long = place(
        &server,
        &tenant,
        json!({
            "instance_type": "h100x1", "region": "r2",
            "job": { "command": "sleep 120", "max_runtime_seconds": 3 },
        }),
    )
    .await;
    order_until(&server, &tenant, &long, "timed_out").await;

    // An instance holds its node in Slurm until cancelled.
    let instance = place(
        &server,
        &tenant,
        json!({ "instance_type": "h100x8", "region": "r2", "duration_seconds": 3600 }),
    )
    .await;
    let running = order_until(&server, &tenant, &instance, "running").await;
    let access = &running["access"];
    assert_eq!(access["driver"], "slurm", "{running:#}");
    let held_by = access["slurm"]["job_id"].as_i64().unwrap_or_default();
    assert!(
        access["slurm"]["command"]
            .as_str()
            .is_some_and(|c| c.starts_with(&format!("srun --jobid={held_by} "))),
        "{access:#}"
    );
    let shown = slurm.run("squeue", &["-h", "-j", &held_by.to_string(), "-o", "%T|%N"]);
    assert_eq!(shown.trim().split('|').next(), Some("RUNNING"));

    // Another tenant's job, on the same cluster, runs as its own user: it
    // sees only its own jobs, and can neither cancel the instance nor
    // read the first tenant's output.
    let theirs = slurm.output_dir() + "/" + &user;
    let probe = place(
        &server,
        &mallory,
        json!({
            "instance_type": "h100x1", "region": "r2",
            "job": { "command": format!(
                "export SLURM_CONF={conf}; echo user=$(id -un); echo seen=$(squeue -h -a -o %i | wc -l); \
                 scancel {held_by} 2>/dev/null && echo cancelled || echo not cancelled; \
                 cat {theirs}/* 2>/dev/null && echo read || echo not read; \
                 ls {theirs} 2>/dev/null && echo listed || echo not listed",
                conf = slurm.conf,
            ) },
        }),
    )
    .await;
    order_until(&server, &mallory, &probe, "completed").await;
    let said = output(&server, &mallory, &probe).await;
    assert_eq!(
        said,
        format!("user={mallory_user}\nseen=1\nnot cancelled\nnot read\nnot listed"),
    );
    // Nor can its job have Gantry, which reads output files as root, read
    // a file it may not read itself: output files replaced by links to a
    // root-only file are refused, while it runs and at its end.
    let secret = slurm.dir.join("etc/slurmdbd.conf");
    let sneaky = place(
        &server,
        &mallory,
        json!({
            "instance_type": "h100x1", "region": "r2",
            "job": { "command": format!(
                "ln -sf {secret} \"$SLURM_JOB_NAME.out\"; ln -sf {secret} \"$SLURM_JOB_NAME.err\"; sleep 7",
                secret = secret.display(),
            ) },
        }),
    )
    .await;
    order_until(&server, &mallory, &sneaky, "completed").await;
    let said = output(&server, &mallory, &sneaky).await;
    assert!(!said.contains("StorageLoc"), "{said}");
    let still = slurm.run("squeue", &["-h", "-j", &held_by.to_string(), "-o", "%T"]);
    assert_eq!(still.trim(), "RUNNING");
    server
        .get(
            &format!("/api/v1/orgs/{}/orders/{instance}", tenant.org_id),
            &mallory.token,
        )
        .await
        .expect(StatusCode::NOT_FOUND);

    server.cancel(&tenant, instance.parse().expect("id")).await;
    order_until(&server, &tenant, &instance, "cancelled").await;
    // Its GPUs are free once Slurm's accounting has the job's end.
    let path = format!("/api/v1/orgs/{}/orders/{instance}/attempts", tenant.org_id);
    until(&server, &tenant.token, &path, "the instance's end", |a| {
        a[0]["ended_at"].is_string()
    })
    .await;
    let state = slurm.accounted(&["-j", &held_by.to_string()], "State");
    assert!(state.starts_with("CANCELLED"), "{state}");

    // A node lost in Slurm fails the job it ran (`NODE_FAIL`): the order
    // is queued again, as for a lost agent, and runs a second attempt.
    let lost = place(
        &server,
        &tenant,
        json!({ "instance_type": "h100x8", "region": "r2", "duration_seconds": 3600 }),
    )
    .await;
    let running = order_until(&server, &tenant, &lost, "running").await;
    let on = running["placement"][0]["node_name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    slurm.run(
        "scontrol",
        &[
            "update",
            &format!("nodename={on}"),
            "state=down",
            "reason=lost power",
        ],
    );
    let path = format!("/api/v1/orgs/{}/orders/{lost}/attempts", tenant.org_id);
    let tries = until(&server, &tenant.token, &path, "a second attempt", |a| {
        a.as_array().is_some_and(|a| a.len() == 2) && a[1]["started_at"].is_string()
    })
    .await;
    assert_eq!(tries[0]["outcome"], "preempted", "{tries:#}");
    assert_eq!(tries[0]["stop_cause"], "node_unhealthy", "{tries:#}");
    server.cancel(&tenant, lost.parse().expect("id")).await;
    order_until(&server, &tenant, &lost, "cancelled").await;
    until(
        &server,
        &tenant.token,
        &path,
        "the second attempt's end",
        |a| a[1]["ended_at"].is_string(),
    )
    .await;

    // A drain in Slurm cordons the node in Gantry, with Slurm's reason;
    // resuming it there makes it ready again.
    slurm.run(
        "scontrol",
        &[
            "update",
            &format!("nodename={first}"),
            "state=drain",
            "reason=fan 3 failed",
        ],
    );
    let node_path = format!("/api/v1/admin/nodes/{first_id}");
    let cordoned = until(&server, op, &node_path, "cordon", |n| {
        n["state"] == "cordoned"
    })
    .await;
    assert_eq!(
        cordoned["state_reason"], "Slurm: fan 3 failed",
        "{cordoned:#}"
    );
    slurm.run(
        "scontrol",
        &["update", &format!("nodename={first}"), "state=resume"],
    );
    until(&server, op, &node_path, "ready again", |n| {
        n["state"] == "ready"
    })
    .await;

    // Slurm not answering: the region says why and an order waits where
    // it is. Had Gantry stopped right after `sbatch` (the job is in Slurm,
    // its id not yet written), the job is found again by its name once
    // Slurm answers, not submitted twice.
    let down = slurm.dir.join("etc/down.conf");
    let conf = std::fs::read_to_string(&slurm.conf).expect("slurm.conf");
    std::fs::write(
        &down,
        conf.lines()
            .map(|l| {
                if l.starts_with("SlurmctldPort=") {
                    "SlurmctldPort=9"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .expect("down.conf");
    let mut declared = json!({
        "region": "r2", "partition": "gpu", "account": "gantry",
        "conf_path": down.to_string_lossy(), "output_dir": slurm.output_dir(),
        "gres_types": { "H100": "h100" }, "users": "per_organization", "user_prefix": "g",
    });
    server
        .put("/api/v1/admin/slurm-clusters", op, declared.clone())
        .await
        .expect(StatusCode::OK);
    until(
        &server,
        op,
        "/api/v1/admin/slurm-clusters",
        "Slurm's silence",
        |c| {
            c[0]["problem"]
                .as_str()
                .is_some_and(|p| p.contains("sinfo"))
        },
    )
    .await;
    let waiting = place(
        &server,
        &tenant,
        json!({ "instance_type": "h100x1", "region": "r2", "job": { "command": "echo submitted by Gantry" } }),
    )
    .await;
    for _ in 0..100 {
        if server
            .count("SELECT COUNT(*) FROM slurm_jobs WHERE job_id IS NULL")
            .await
            == 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let path = format!("/api/v1/orgs/{}/orders/{waiting}", tenant.org_id);
    let stuck = until(&server, &tenant.token, &path, "the order's reason", |o| {
        o["pending_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("Slurm has not taken it yet: `sbatch`"))
    })
    .await;
    assert_eq!(stuck["status"], "scheduled", "{stuck:#}");
    let name = format!("gantry-{}-1", waiting.replace('-', ""));
    slurm.run(
        "sbatch",
        &[
            &format!("--job-name={name}"),
            &format!("--nodelist={first}"),
            "--gres=gpu:h100:1",
            &format!("--output={}/{user}/{name}.out", slurm.output_dir()),
            &format!("--uid={user}"),
            "--wrap=echo found again",
        ],
    );
    declared["conf_path"] = json!(slurm.conf);
    server
        .put("/api/v1/admin/slurm-clusters", op, declared)
        .await
        .expect(StatusCode::OK);
    let done = order_until(&server, &tenant, &waiting, "completed").await;
    assert_eq!(done["pending_reason"], Value::Null, "{done:#}");
    let said = output(&server, &tenant, &waiting).await;
    assert_eq!(said, "found again");

    // Nothing Gantry submitted ran twice.
    let submitted = slurm.accounted(&[], "JobName");
    let mut names: Vec<&str> = submitted
        .lines()
        .filter(|n| n.starts_with("gantry-"))
        .collect();
    let all = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all, "{submitted}");
    assert_eq!(all, 12, "{submitted}");

    // The month's usage is Slurm's accounting: each order's GPU-seconds
    // are its job's elapsed seconds times the GPUs Slurm gave it.
    server.metered_exactly().await;
    let accounted = slurm.accounted(&[], "JobName,ElapsedRaw,AllocTRES");
    let mut by_slurm: BTreeMap<String, i64> = BTreeMap::new();
    for line in accounted.lines() {
        let fields: Vec<&str> = line.split('|').collect();
        let Some(order) = fields[0]
            .strip_prefix("gantry-")
            .and_then(|n| n.split('-').next())
            .and_then(|id| uuid::Uuid::parse_str(id).ok())
        else {
            continue;
        };
        let gpus: i64 = fields[2]
            .split(',')
            .find_map(|t| t.strip_prefix("gres/gpu="))
            .and_then(|n| n.parse().ok())
            .expect("GPUs in the job's TRES");
        let elapsed: i64 = fields[1].parse().expect("elapsed seconds");
        *by_slurm.entry(order.to_string()).or_default() += elapsed * gpus;
    }
    by_slurm.retain(|_, seconds| *seconds > 0);
    let mut by_gantry: BTreeMap<String, i64> = BTreeMap::new();
    for who in [&tenant, &mallory] {
        let usage = server
            .get(
                &format!(
                    "/api/v1/orgs/{}/usage?group_by=order&from={}&to={}",
                    who.org_id,
                    crate::support::query_time(chrono::Utc::now() - chrono::TimeDelta::hours(1)),
                    crate::support::query_time(chrono::Utc::now() + chrono::TimeDelta::hours(1)),
                ),
                &who.token,
            )
            .await;
        usage.expect(StatusCode::OK);
        for group in usage.body["groups"].as_array().into_iter().flatten() {
            let seconds = group["gpu_seconds"].as_i64().unwrap_or_default();
            if seconds > 0 {
                by_gantry.insert(
                    group["key"].as_str().unwrap_or_default().to_owned(),
                    seconds,
                );
            }
        }
    }
    assert_eq!(by_gantry, by_slurm, "{accounted}");
}
