//! A real Slurm 22.05 cluster for a test (`scripts/test-slurm.sh`:
//! slurmctld, slurmdbd on MariaDB, one slurmd per emulated 8-GPU node), and
//! the Unix users a Slurm region's organizations run as.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A Slurm cluster of its own for one test, stopped when dropped.
pub struct SlurmCluster {
    pub dir: PathBuf,
    /// Its `SLURM_CONF`.
    pub conf: String,
}

impl SlurmCluster {
    /// Starts `nodes` nodes of eight H100s each.
    pub fn start(nodes: u32) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "gantry-slurm-{}-{}",
            std::process::id(),
            uuid::Uuid::now_v7().simple()
        ));
        let out = Command::new(script())
            .args([
                "start",
                &dir.to_string_lossy(),
                &nodes.to_string(),
                "8",
                "h100",
            ])
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run the Slurm fixture script");
        assert!(out.status.success(), "the Slurm fixture script failed");
        let conf = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Self { dir, conf }
    }

    /// Runs a Slurm command against this cluster; its output.
    pub fn run(&self, program: &str, args: &[&str]) -> String {
        let out = Command::new(program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .env("SLURM_TIME_FORMAT", "%s")
            .output()
            .expect("run a Slurm command");
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What accounting holds of the last hour's jobs, every user's, one
    /// `|`-separated line per job: `sacct` with `filters`, in `format`.
    pub fn accounted(&self, filters: &[&str], format: &str) -> String {
        let format = format!("--format={format}");
        let mut args = vec![
            "-X",
            "-n",
            "--parsable2",
            "--allusers",
            "--starttime=now-1hour",
            &format,
        ];
        args.extend_from_slice(filters);
        self.run("sacct", &args)
    }

    /// Where jobs' output files go.
    pub fn output_dir(&self) -> String {
        self.dir.join("out").to_string_lossy().into_owned()
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        Command::new(script())
            .args(["stop", &self.dir.to_string_lossy()])
            .status()
            .ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// The Unix users a test's organizations run as, removed when dropped.
pub struct UnixUsers(pub Vec<String>);

impl UnixUsers {
    /// The user of each of `orgs` for prefix `prefix`, made on this host
    /// as the cluster's operator would make them on every node.
    pub fn make(prefix: &str, orgs: &[uuid::Uuid]) -> Self {
        let names: Vec<String> = orgs
            .iter()
            .map(|org| {
                let hex = org.simple().to_string();
                format!("{prefix}{}", &hex[hex.len() - 12..])
            })
            .collect();
        for name in &names {
            let made = Command::new("useradd")
                .args(["--system", "--no-create-home", "--user-group"])
                .args(["--shell", "/usr/sbin/nologin", name])
                .status()
                .expect("useradd");
            assert!(made.success(), "useradd {name}");
        }
        Self(names)
    }
}

impl Drop for UnixUsers {
    fn drop(&mut self) {
        for name in &self.0 {
            // Forced: a failed test may leave its jobs running as the user.
            Command::new("userdel")
                .args(["--force", name])
                .status()
                .ok();
        }
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-slurm.sh")
}
