//! An instance's own SSH server: OpenSSH's `sshd` run inside the sandbox
//! as the workload's user, on a node port, with a host key of its own and
//! exactly the keys its order chose. Everything it reads lives in one
//! directory per workload, mounted read-only at [`INSIDE`].

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the directory appears inside the sandbox.
pub const INSIDE: &str = "/run/gantry-ssh";
/// The login name on every instance.
pub const USER: &str = "gantry";

/// One instance's SSH files.
pub struct SshDir {
    pub dir: PathBuf,
}

impl SshDir {
    /// Writes the host key, configuration, account files and keys for a
    /// server on `port` as `uid`, with `env` set in every session;
    /// answers the host key's fingerprint.
    pub fn create(
        dir: &Path,
        ssh_keygen: &Path,
        uid: u32,
        port: u16,
        keys: &[String],
        env: &[(String, String)],
    ) -> Result<(Self, String), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| fail("clearing the SSH directory", &e))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| fail("creating the SSH directory", &e))?;
        let key = dir.join("ssh_host_ed25519_key");
        let made = Command::new(ssh_keygen)
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "gantry-instance",
                "-f",
            ])
            .arg(&key)
            .output()
            .map_err(|e| fail("running ssh-keygen", &e))?;
        if !made.status.success() {
            return Err(format!(
                "ssh-keygen could not make a host key: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            ));
        }
        let listed = Command::new(ssh_keygen)
            .arg("-lf")
            .arg(key.with_extension("pub"))
            .output()
            .map_err(|e| fail("running ssh-keygen", &e))?;
        let fingerprint = String::from_utf8_lossy(&listed.stdout)
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let files = [
            ("sshd_config", sshd_config(port, env)),
            ("passwd", passwd(uid)),
            (
                "group",
                format!("root:x:0:\n{USER}:x:{uid}:\nnogroup:x:65534:\n"),
            ),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).map_err(|e| fail("writing SSH files", &e))?;
        }
        let ssh = Self {
            dir: dir.to_owned(),
        };
        ssh.authorize(keys)
            .map_err(|e| fail("writing authorized keys", &e))?;
        // sshd runs as the workload's user and insists that its host key be
        // that user's alone.
        for entry in std::fs::read_dir(dir)
            .map_err(|e| fail("reading the SSH directory", &e))?
            .flatten()
        {
            let path = entry.path();
            let mode = if path == key { 0o600 } else { 0o644 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .and_then(|()| std::os::unix::fs::chown(&path, Some(uid), Some(uid)))
                .map_err(|e| fail("handing the SSH files to the workload's user", &e))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| fail("opening the SSH directory", &e))?;
        Ok((ssh, fingerprint))
    }

    /// Replaces the admitted keys (through a rename: sshd never reads half
    /// a file). Unchanged keys are not rewritten.
    pub fn authorize(&self, keys: &[String]) -> std::io::Result<()> {
        let path = self.dir.join("authorized_keys");
        let text: String = keys.iter().map(|k| format!("{}\n", k.trim())).collect();
        if std::fs::read_to_string(&path).is_ok_and(|current| current == text) {
            return Ok(());
        }
        let next = self.dir.join("authorized_keys.next");
        std::fs::write(&next, text)?;
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o644))?;
        if let Ok(meta) = std::fs::metadata(&self.dir) {
            use std::os::unix::fs::MetadataExt;
            std::os::unix::fs::chown(&next, Some(meta.uid()), Some(meta.gid())).ok();
        }
        std::fs::rename(next, path)
    }
}

/// Sets up an instance's SSH server in `dir` when it gets one (`port`) and
/// this node can make host keys; answers the directory to mount and how
/// the server is reached.
pub fn for_instance(
    dir: PathBuf,
    keygen: Option<&Path>,
    uid: u32,
    port: Option<u16>,
    keys: &[String],
    env: &[(String, String)],
) -> Result<Option<(PathBuf, crate::runtime::SshAccess)>, String> {
    let (Some(port), Some(keygen)) = (port, keygen) else {
        return Ok(None);
    };
    let (_, fingerprint) = SshDir::create(&dir, keygen, uid, port, keys, env)?;
    let access = crate::runtime::SshAccess {
        user: USER.to_owned(),
        port,
        host_key_fingerprint: fingerprint,
    };
    Ok(Some((dir, access)))
}

fn passwd(uid: u32) -> String {
    format!(
        "root:x:0:0:root:/root:/usr/sbin/nologin\n\
         {USER}:x:{uid}:{uid}:Gantry instance:/scratch:/bin/sh\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
}

/// Keys only; no passwords, no agent or X11 forwarding; sessions get the
/// workload's GPU and order variables (sshd starts them from nothing).
fn sshd_config(port: u16, env: &[(String, String)]) -> String {
    let set_env: Vec<String> = env
        .iter()
        .filter(|(k, v)| {
            (k.starts_with("GANTRY_") || k == "CUDA_VISIBLE_DEVICES")
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || ",-_.:/".contains(c))
        })
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let mut config = format!(
        "Port {port}\n\
         ListenAddress 0.0.0.0\n\
         HostKey {INSIDE}/ssh_host_ed25519_key\n\
         AuthorizedKeysFile {INSIDE}/authorized_keys\n\
         AllowUsers {USER}\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         PermitRootLogin no\n\
         PermitUserEnvironment no\n\
         AllowAgentForwarding no\n\
         X11Forwarding no\n\
         PidFile none\n\
         Subsystem sftp internal-sftp\n"
    );
    if !set_env.is_empty() {
        config.push_str(&format!("SetEnv {}\n", set_env.join(" ")));
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_get_only_gantry_and_gpu_variables() {
        let env = [
            ("CUDA_VISIBLE_DEVICES".to_owned(), "1,3".to_owned()),
            ("GANTRY_ORDER_ID".to_owned(), "abc-1".to_owned()),
            ("HF_TOKEN".to_owned(), "secret".to_owned()),
            ("GANTRY_NOTE".to_owned(), "has space".to_owned()),
        ];
        let config = sshd_config(42017, &env);
        assert!(config.contains("Port 42017\n"));
        assert!(config.contains("SetEnv CUDA_VISIBLE_DEVICES=1,3 GANTRY_ORDER_ID=abc-1\n"));
        assert!(config.contains("PasswordAuthentication no\n"));
        assert!(!config.contains("HF_TOKEN"));
    }
}
