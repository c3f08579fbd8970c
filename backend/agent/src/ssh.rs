//! An instance's own SSH server: the node's OpenSSH `sshd`, in a sandbox of
//! its own that joins the instance's user, PID, network, IPC and UTS
//! namespaces, sees the node's system read-only and the instance's own view
//! (its root, `/proc`, `/dev`, …) at [`ROOT_AT`]. Sessions log in as the
//! instance's root and are changed into that view (`ChrootDirectory`), so
//! a shell, `scp` or `sftp` land in the instance's image as its root, and
//! the image needs no SSH server of its own. It listens on a node port,
//! with a host key of its own and exactly the keys its order chose.
//! Everything it reads lives in one directory per instance, mounted
//! read-only at [`INSIDE`].

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::devices::DeviceNode;
use crate::root::Root;
use crate::view::View;

/// Where the directory appears inside the server's sandbox.
pub const INSIDE: &str = "/run/gantry-ssh";
/// Where the instance's view is, inside the server's sandbox.
pub const ROOT_AT: &str = "/run/gantry-root";
/// The login name on every instance.
pub const USER: &str = "root";
/// The descriptor bubblewrap finds the instance's PID namespace at.
const PIDNS_FD: i32 = 102;
/// The node's directories the server runs from, read-only.
pub const SYSTEM: &[&str] = &[
    "usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
];
/// The capabilities of container runtimes' root (podman's defaults):
/// enough to install packages and manage files and users, nothing that
/// mounts, loads modules or reaches the kernel's knobs.
pub const ROOT_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_NET_BIND_SERVICE",
    "CAP_SETFCAP",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SYS_CHROOT",
];

/// One instance's SSH files.
pub struct SshDir {
    pub dir: PathBuf,
}

/// What the server's files say.
pub struct Settings<'a> {
    /// The node's id of the instance's root.
    pub owner: u32,
    pub port: u16,
    pub keys: &'a [String],
    /// Variables every session starts with.
    pub env: &'a [(String, String)],
    /// The login shell, inside the instance.
    pub shell: &'a str,
}

impl SshDir {
    /// Writes the host key, configuration, account files and keys;
    /// answers the host key's fingerprint.
    pub fn create(
        dir: &Path,
        ssh_keygen: &Path,
        settings: &Settings<'_>,
    ) -> Result<(Self, String), String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| fail("clearing the SSH directory", &e))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| fail("creating the SSH directory", &e))?;
        let key = dir.join("ssh_host_ed25519_key");
        let fingerprint = host_key(ssh_keygen, &key)?;
        let files = [
            ("sshd_config", sshd_config(settings.port, settings.env)),
            ("passwd", passwd(settings.shell)),
            (
                "group",
                "root:x:0:\nsshd:x:101:\nnogroup:x:65534:\n".to_owned(),
            ),
            // "*": no password, yet not a locked account, which sshd refuses.
            (
                "shadow",
                "root:*:20000:0:99999:7:::\nsshd:*:20000:0:99999:7:::\n".to_owned(),
            ),
        ];
        for (name, text) in files {
            std::fs::write(dir.join(name), text).map_err(|e| fail("writing SSH files", &e))?;
        }
        let ssh = Self {
            dir: dir.to_owned(),
        };
        ssh.authorize(settings.keys)
            .map_err(|e| fail("writing authorized keys", &e))?;
        // sshd insists that its host key and the shadow file be its own
        // root's alone.
        for entry in std::fs::read_dir(dir)
            .map_err(|e| fail("reading the SSH directory", &e))?
            .flatten()
        {
            let path = entry.path();
            let private = path == key || path.ends_with("shadow");
            let mode = if private { 0o600 } else { 0o644 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .and_then(|()| {
                    std::os::unix::fs::chown(&path, Some(settings.owner), Some(settings.owner))
                })
                .map_err(|e| fail("handing the SSH files to the instance's root", &e))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .and_then(|()| {
                std::os::unix::fs::chown(dir, Some(settings.owner), Some(settings.owner))
            })
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

/// The instance's login shell: bash where its image has one.
pub fn shell_of(tree: &Path) -> &'static str {
    if tree.join("bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

fn passwd(shell: &str) -> String {
    format!(
        "{USER}:x:0:0:root:/root:{shell}\n\
         sshd:x:101:65534::/run/sshd:/usr/sbin/nologin\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
}

/// Keys only; no passwords, no agent or X11 forwarding; sessions changed
/// into the instance's view and started with its variables (sshd starts
/// them from nothing).
fn sshd_config(port: u16, env: &[(String, String)]) -> String {
    let set_env: Vec<String> = env
        .iter()
        .filter(|(k, v)| {
            !k.is_empty()
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !v.chars().any(|c| c.is_control() || c == '"' || c == '\\')
        })
        .map(|(k, v)| format!("\"{k}={v}\""))
        .collect();
    let mut config = format!(
        "Port {port}\n\
         ListenAddress 0.0.0.0\n\
         HostKey {INSIDE}/ssh_host_ed25519_key\n\
         AuthorizedKeysFile {INSIDE}/authorized_keys\n\
         AllowUsers {USER}\n\
         PermitRootLogin prohibit-password\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         PermitUserEnvironment no\n\
         AllowAgentForwarding no\n\
         X11Forwarding no\n\
         PrintMotd no\n\
         PrintLastLog no\n\
         PidFile none\n\
         ChrootDirectory {ROOT_AT}\n\
         Subsystem sftp internal-sftp\n"
    );
    if !set_env.is_empty() {
        config.push_str(&format!("SetEnv {}\n", set_env.join(" ")));
    }
    config
}

/// An instance's SSH server, ready to start once the instance runs.
#[derive(Debug)]
pub struct Server {
    pub bwrap: PathBuf,
    /// Its files.
    pub dir: PathBuf,
    pub root: Root,
    /// The instance's GPUs' device nodes.
    pub devices: Vec<DeviceNode>,
    /// The NVIDIA driver's files.
    pub driver: Vec<crate::driver::DriverFile>,
    /// The instance's cgroup directories, shown read-only.
    pub cgroups: Vec<PathBuf>,
    pub lxcfs: Option<PathBuf>,
    /// Where the server's processes join the instance's cgroups.
    pub cgroup_procs: Vec<PathBuf>,
}

impl Server {
    /// Starts the server beside the instance whose process `pid` is inside
    /// its namespaces, in its process group `pgid` (so that it stops with
    /// it).
    pub fn start(&self, pid: u32, pgid: i32) -> Result<Child, String> {
        let sshd = crate::runtime::find_program("sshd").ok_or("this node has no sshd")?;
        let open = |path: String| -> Result<OwnedFd, String> {
            std::fs::File::open(&path)
                .map(OwnedFd::from)
                .map_err(|e| format!("joining the instance ({path}): {e}"))
        };
        let net = open(format!("/proc/{pid}/ns/net"))?;
        let uts = open(format!("/proc/{pid}/ns/uts"))?;
        let ipc = open(format!("/proc/{pid}/ns/ipc"))?;
        let pidns = open(format!("/proc/{pid}/ns/pid"))?;
        let user = crate::userns::open(&self.root.userns)
            .map_err(|e| format!("joining the instance's user namespace: {e}"))?;
        let mut args: Vec<OsString> = vec!["--pidns".into(), PIDNS_FD.to_string().into()];
        for name in SYSTEM {
            let host = Path::new("/").join(name);
            match std::fs::read_link(&host) {
                Ok(target) => args.extend(["--symlink".into(), target.into(), host.into()]),
                Err(_) if host.is_dir() => {
                    args.extend(["--ro-bind".into(), host.clone().into(), host.into()]);
                }
                Err(_) => {}
            }
        }
        for file in ["passwd", "group", "shadow"] {
            args.extend([
                "--ro-bind".into(),
                self.dir.join(file).into(),
                Path::new("/etc").join(file).into(),
            ]);
        }
        args.extend(["--ro-bind".into(), self.dir.clone().into(), INSIDE.into()]);
        args.extend(
            [
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--perms",
                "0755",
                "--dir",
                "/run/sshd",
            ]
            .map(OsString::from),
        );
        let view = View {
            root: &self.root,
            devices: &self.devices,
            driver: &self.driver,
            cgroups: &self.cgroups,
            lxcfs: self.lxcfs.as_deref(),
        };
        args.extend(view.args(Path::new(ROOT_AT)));
        args.extend(capabilities());
        args.push("--".into());
        args.push(sshd.into());
        args.extend(["-D", "-e", "-f"].map(OsString::from));
        args.push(Path::new(INSIDE).join("sshd_config").into());
        let joins = crate::cgroup::procs_cstrings(&self.cgroup_procs);
        let namespaces = [
            (net.as_raw_fd(), libc::CLONE_NEWNET),
            (uts.as_raw_fd(), libc::CLONE_NEWUTS),
            (ipc.as_raw_fd(), libc::CLONE_NEWIPC),
            (user.as_raw_fd(), libc::CLONE_NEWUSER),
        ];
        let pidns_fd = pidns.as_raw_fd();
        let mut command = Command::new(&self.bwrap);
        command
            .args(args)
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(pgid);
        // SAFETY: between fork and exec only raw system calls on memory made
        // before the fork (the cgroup paths, the descriptors).
        unsafe {
            command.pre_exec(move || {
                crate::cgroup::join(&joins)?;
                if libc::dup2(pidns_fd, PIDNS_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                crate::userns::enter(&namespaces)
            });
        }
        command
            .spawn()
            .map_err(|e| format!("starting the instance's SSH server: {e}"))
    }
}

/// bubblewrap's capability arguments for a workload's root.
pub fn capabilities() -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["--cap-drop".into(), "ALL".into()];
    for cap in ROOT_CAPABILITIES {
        args.extend(["--cap-add".into(), (*cap).into()]);
    }
    args
}

/// Makes an ed25519 host key at `key` (its public half beside it);
/// answers its fingerprint.
pub fn host_key(ssh_keygen: &Path, key: &Path) -> Result<String, String> {
    let fail = |e: &dyn std::fmt::Display| format!("running ssh-keygen: {e}");
    std::fs::remove_file(key).ok();
    std::fs::remove_file(key.with_extension("pub")).ok();
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
        .arg(key)
        .output()
        .map_err(|e| fail(&e))?;
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
        .map_err(|e| fail(&e))?;
    Ok(String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned())
}

/// Sets up an instance's SSH server files in `dir` when it gets one
/// (`port`) and this node can make host keys; answers how the server is
/// reached.
pub fn for_instance<'a>(
    dir: PathBuf,
    keygen: Option<&Path>,
    port: Option<u16>,
    settings: impl FnOnce(u16) -> Settings<'a>,
) -> Result<Option<crate::runtime::SshAccess>, String> {
    let (Some(port), Some(keygen)) = (port, keygen) else {
        return Ok(None);
    };
    let (_, fingerprint) = SshDir::create(&dir, keygen, &settings(port))?;
    Ok(Some(crate::runtime::SshAccess {
        user: USER.to_owned(),
        port,
        host_key_fingerprint: fingerprint,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_start_in_the_instance_with_its_variables() {
        let env = [
            ("CUDA_VISIBLE_DEVICES".to_owned(), "1,3".to_owned()),
            ("PATH".to_owned(), "/opt/conda/bin:/usr/bin".to_owned()),
            ("NOTE".to_owned(), "has space".to_owned()),
            ("BAD".to_owned(), "quote\"inside".to_owned()),
        ];
        let config = sshd_config(42017, &env);
        assert!(config.contains("Port 42017\n"));
        assert!(config.contains(&format!("ChrootDirectory {ROOT_AT}\n")));
        assert!(config.contains(
            "SetEnv \"CUDA_VISIBLE_DEVICES=1,3\" \"PATH=/opt/conda/bin:/usr/bin\" \"NOTE=has space\"\n"
        ));
        assert!(config.contains("PasswordAuthentication no\n"));
        assert!(!config.contains("BAD"));
    }
}
