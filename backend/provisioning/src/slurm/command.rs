//! Running Slurm's commands: on this host, or on the cluster's login node
//! over SSH. Every argument travels as one argument (quoted for the remote
//! shell over SSH), so nothing in a value can become an option or a second
//! command.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use gantry_entities::slurm_cluster;
use gantry_workload::jobs::quoted;

/// How long one command may take before Slurm counts as not answering.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The most output read of one command.
const OUTPUT_MAX: usize = 64 << 20;

/// A Slurm command that could not run or failed: what to tell the
/// operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{program}` {problem}")]
pub struct SlurmError {
    pub program: String,
    pub problem: String,
}

/// Where a cluster's commands run.
#[derive(Debug, Clone)]
pub struct Slurm {
    conf: Option<String>,
    login_host: Option<String>,
}

impl Slurm {
    pub fn of(cluster: &slurm_cluster::Model) -> Self {
        Self {
            conf: cluster.conf_path.clone(),
            login_host: cluster.login_host.clone(),
        }
    }

    /// Runs `program` with `args` (and `stdin`), answering its output.
    pub async fn run(
        &self,
        program: &str,
        args: &[String],
        env: &[(&str, &str)],
        stdin: Option<&str>,
    ) -> Result<String, SlurmError> {
        let out = self.run_bytes(program, args, env, stdin).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// [`Self::run`], answering its output's bytes as they are.
    pub async fn run_bytes(
        &self,
        program: &str,
        args: &[String],
        env: &[(&str, &str)],
        stdin: Option<&str>,
    ) -> Result<Vec<u8>, SlurmError> {
        let failed = |problem: String| SlurmError {
            program: program.to_owned(),
            problem,
        };
        let mut env: Vec<(&str, &str)> = env.to_vec();
        if let Some(conf) = &self.conf {
            env.push(("SLURM_CONF", conf));
        }
        let mut command = match &self.login_host {
            None => {
                let mut command = Command::new(program);
                command.args(args).envs(env.iter().copied());
                command
            }
            Some(host) => {
                // ssh hands the remote shell one line: each word is quoted.
                let mut line = vec!["env".to_owned()];
                line.extend(env.iter().map(|(k, v)| quoted(&format!("{k}={v}"))));
                line.push(quoted(program));
                line.extend(args.iter().map(|a| quoted(a)));
                let mut command = Command::new("ssh");
                command
                    .args(["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "--"])
                    .arg(host)
                    .arg(line.join(" "));
                command
            }
        };
        command
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| failed(format!("could not start: {e}")))?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())
                .await
                .map_err(|e| failed(format!("did not take its input: {e}")))?;
        }
        let output = tokio::time::timeout(TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| failed(format!("did not answer in {} s", TIMEOUT.as_secs())))?
            .map_err(|e| failed(format!("failed: {e}")))?;
        if !output.status.success() {
            // Some tools (`sacctmgr`) say why on standard output.
            let said = if output.stderr.iter().all(u8::is_ascii_whitespace) {
                String::from_utf8_lossy(&output.stdout)
            } else {
                String::from_utf8_lossy(&output.stderr)
            };
            let said = said.trim();
            let said: String = said.chars().take(500).collect();
            return Err(failed(format!(
                "exited with {}: {said}",
                output
                    .status
                    .code()
                    .map_or_else(|| "a signal".to_owned(), |c| format!("code {c}"))
            )));
        }
        let mut out = output.stdout;
        out.truncate(OUTPUT_MAX);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use gantry_workload::jobs::quoted;

    #[test]
    fn a_quoted_word_stays_one_word() {
        for word in [
            "plain",
            "a b",
            "it's",
            "$(rm -rf /)",
            "`id`",
            "a\nb",
            "--opt",
        ] {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", quoted(word)))
                .output()
                .expect("sh");
            assert_eq!(String::from_utf8_lossy(&out.stdout), word);
        }
    }
}
