//! The `sbatch` call for one attempt of an order: options that pin it to
//! the nodes Gantry chose, and a batch script that runs the tenant's
//! command once per node (or holds the nodes for an instance).
//!
//! Nothing a tenant writes reaches an option: options carry only Gantry's
//! ids, the nodes Slurm named and the operator's settings, each as one
//! argument. The tenant's command, arguments, variables and working
//! directory reach the script only quoted, as values.

use gantry_workload::jobs::{Launch, quoted};

/// Slurm's job name for attempt `attempt` of order `order_id`.
pub fn job_name(order_id: uuid::Uuid, attempt: i32) -> String {
    format!("gantry-{}-{attempt}", order_id.simple())
}

/// What Gantry hands `sbatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submission {
    pub args: Vec<String>,
    pub script: String,
}

/// The placement and limits of one attempt.
pub struct Pinned<'a> {
    pub name: &'a str,
    pub order_id: uuid::Uuid,
    pub partition: &'a str,
    pub account: Option<&'a str>,
    /// The nodes Gantry chose, in rank order.
    pub nodes: &'a [String],
    pub gres_type: &'a str,
    pub gpus_per_node: u32,
    /// Whether it holds its nodes whole.
    pub exclusive: bool,
    /// Slurm's limit, in seconds (Slurm keeps whole minutes, rounded up).
    pub time_limit_seconds: Option<i64>,
    /// The organization's Unix user it runs as, where not the submitter.
    pub user: Option<&'a str>,
    /// Its output files' directory, and its working directory.
    pub output_dir: &'a str,
}

/// The `sbatch` arguments and script for `pinned`: a job runs `launch`
/// once per node, an instance (no launch) holds its nodes until stopped.
pub fn submission(pinned: &Pinned<'_>, launch: Option<&Launch>) -> Submission {
    let dir = pinned.output_dir.trim_end_matches('/');
    let mut args = vec![
        "--parsable".to_owned(),
        format!("--job-name={}", pinned.name),
        format!("--comment=gantry order {}", pinned.order_id),
        format!("--partition={}", pinned.partition),
        format!("--nodelist={}", pinned.nodes.join(",")),
        format!("--nodes={}", pinned.nodes.len()),
        "--ntasks-per-node=1".to_owned(),
        format!("--output={dir}/{}.out", pinned.name),
        format!("--error={dir}/{}.err", pinned.name),
        format!("--chdir={dir}"),
        // Slurm's scheduler only executes: the job never waits for a
        // different node, and a node failure hands it back to Gantry.
        "--no-requeue".to_owned(),
        "--export=NONE".to_owned(),
    ];
    if pinned.gpus_per_node > 0 {
        let gres = if pinned.gres_type.is_empty() {
            format!("--gres=gpu:{}", pinned.gpus_per_node)
        } else {
            format!("--gres=gpu:{}:{}", pinned.gres_type, pinned.gpus_per_node)
        };
        args.push(gres);
    }
    if pinned.exclusive {
        args.push("--exclusive".to_owned());
    }
    if let Some(user) = pinned.user {
        args.push(format!("--uid={user}"));
        args.push(format!("--gid={user}"));
    }
    if let Some(account) = pinned.account {
        args.push(format!("--account={account}"));
    }
    if let Some(seconds) = pinned.time_limit_seconds {
        let minutes = (seconds.max(1) + 59) / 60;
        args.push(format!("--time={minutes}"));
    }
    Submission {
        args,
        script: script(pinned, launch),
    }
}

fn script(pinned: &Pinned<'_>, launch: Option<&Launch>) -> String {
    let mut script = format!(
        "#!/bin/bash\n# Gantry order {}: {}\n",
        pinned.order_id, pinned.name
    );
    let Some(launch) = launch else {
        // An instance: the allocation is the product; it lasts until
        // Gantry cancels it.
        script.push_str("exec sleep infinity\n");
        return script;
    };
    for (key, value) in &launch.env {
        // Each node's rank is set below: Slurm's node id in a gang.
        if key == "NODE_RANK" || !is_name(key) {
            continue;
        }
        script.push_str(&format!("export {key}={}\n", quoted(value)));
    }
    script.push_str(&format!(
        "export GANTRY_COMMAND={}\n",
        quoted(&launch.command)
    ));
    if pinned.nodes.len() == 1 {
        // One node: the batch step holds its GPUs already, and a step of
        // its own would only add a launch.
        if let Some(dir) = &launch.working_dir {
            script.push_str(&format!("cd -- {} || exit 1\n", quoted(dir)));
        }
        script.push_str("export NODE_RANK=0\nexec /bin/bash -c \"$GANTRY_COMMAND\"\n");
        return script;
    }
    let chdir = launch
        .working_dir
        .as_deref()
        .map(|dir| format!(" --chdir={}", quoted(dir)))
        .unwrap_or_default();
    // One task per node, with this script's variables (`--export=NONE`
    // above keeps the submitting host's out, and would reach the step
    // too); the tenant's line is run by a shell of its own, never read by
    // this script's.
    script.push_str(&format!(
        "exec srun --export=ALL --ntasks-per-node=1 --kill-on-bad-exit=1{chdir} /bin/bash -c 'export NODE_RANK=$SLURM_NODEID; exec /bin/bash -c \"$GANTRY_COMMAND\"'\n"
    ));
    script
}

fn is_name(key: &str) -> bool {
    !key.is_empty()
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pinned<'a>(nodes: &'a [String]) -> Pinned<'a> {
        Pinned {
            name: "gantry-abc-1",
            order_id: uuid::Uuid::nil(),
            partition: "gpu",
            account: Some("gantry"),
            nodes,
            gres_type: "h100",
            gpus_per_node: 8,
            exclusive: true,
            time_limit_seconds: Some(61),
            user: Some("gantry-0123456789ab"),
            output_dir: "/srv/out/gantry-0123456789ab",
        }
    }

    #[test]
    fn options_pin_the_job_to_gantrys_nodes() {
        let nodes = vec!["gpu001".to_owned(), "gpu002".to_owned()];
        let submission = submission(&pinned(&nodes), None);
        for arg in [
            "--nodelist=gpu001,gpu002",
            "--nodes=2",
            "--gres=gpu:h100:8",
            "--exclusive",
            "--account=gantry",
            "--time=2",
            "--output=/srv/out/gantry-0123456789ab/gantry-abc-1.out",
            "--chdir=/srv/out/gantry-0123456789ab",
            "--uid=gantry-0123456789ab",
            "--gid=gantry-0123456789ab",
        ] {
            assert!(submission.args.iter().any(|a| a == arg), "{arg}");
        }
        assert!(submission.script.contains("exec sleep infinity"));
    }

    /// The tenant's words run as its command, and nothing else: run the
    /// script's own lines (with `srun` standing in for a shell that runs
    /// its arguments) and see what the command saw, on one node and on a
    /// gang's.
    #[test]
    fn hostile_values_stay_values() {
        for nodes in [
            vec!["gpu001".to_owned()],
            vec!["gpu001".to_owned(), "gpu002".to_owned()],
        ] {
            hostile_values_stay_values_on(&nodes);
        }
    }

    fn hostile_values_stay_values_on(nodes: &[String]) {
        let hostile = "a'; touch /tmp/owned; echo '$(id) `id` \n--help";
        let launch = Launch {
            command: "printf '%s|%s' \"$PAYLOAD\" \"$NODE_RANK\"".to_owned(),
            working_dir: Some("/tmp".to_owned()),
            env: vec![
                ("PAYLOAD".to_owned(), hostile.to_owned()),
                ("BAD NAME; rm".to_owned(), "x".to_owned()),
                ("NODE_RANK".to_owned(), "9".to_owned()),
            ],
        };
        let submission = submission(&pinned(nodes), Some(&launch));
        assert!(!submission.script.contains("BAD NAME"));
        let dir = std::env::temp_dir().join(format!(
            "gantry-script-{}-{}",
            std::process::id(),
            nodes.len()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let srun = dir.join("srun");
        std::fs::write(
            &srun,
            "#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nSLURM_NODEID=0 exec \"$@\"\n",
        )
        .expect("srun");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "chmod +x {0}/srun; PATH={0}:$PATH; {1}",
                dir.display(),
                submission.script.replace("exec srun", "srun")
            ))
            .output()
            .expect("bash");
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{hostile}|0"),
            "on {} node(s): {}",
            nodes.len(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
