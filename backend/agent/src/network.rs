//! A private network for a sandboxed workload: bubblewrap gives it a
//! network namespace of its own (only loopback), and slirp4netns connects
//! that namespace to the outside through user-mode NAT, with the host's
//! loopback out of reach and only the workload's node ports forwarded in.
//! So a service one tenant binds on 127.0.0.1, or any port it did not ask
//! to expose, is not reachable from another tenant's workload, and no
//! workload reaches services on the node's own loopback.
//!
//! The workload is held before its command runs (bubblewrap's block fd)
//! until its network is up and its ports are forwarded.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The descriptor numbers bubblewrap is told to use in the workload's
/// first process: high enough to clash with nothing the wrapper opens.
pub const INFO_FD: i32 = 100;
pub const BLOCK_FD: i32 = 101;
/// slirp4netns's DNS forwarder, as the workload's resolver.
pub const RESOLV_CONF: &str = "nameserver 10.0.2.3\n";
/// How long each step of bringing the network up may take.
const STEP: Duration = Duration::from_secs(5);

/// A workload's network while it lasts: slirp4netns.
pub struct Helper {
    slirp4netns: Child,
}

impl Helper {
    /// Ends slirp4netns (if the workload's end has not) and reaps it.
    pub fn stop(mut self) {
        self.slirp4netns.kill().ok();
        self.slirp4netns.wait().ok();
    }
}

/// What the workload's network needs once its sandbox exists.
pub struct PrivateNetwork {
    pub slirp4netns: PathBuf,
    /// The API socket, for port forwards.
    pub socket: PathBuf,
    /// Node ports forwarded to the same port inside.
    pub forwards: Vec<u16>,
    /// Released once the network is up (write end).
    pub block: OwnedFd,
    /// The group slirp4netns runs as, where the node's firewall tells its
    /// traffic apart (see `fabric`).
    pub gid: Option<u32>,
}

/// A pipe bubblewrap writes its child's pid to (`--info-fd`), as (our
/// end, its end).
pub fn info_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = std::io::pipe()?;
    Ok((read.into(), write.into()))
}

/// A pipe bubblewrap waits on before the command (`--block-fd`), as (our
/// end, its end).
pub fn block_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = std::io::pipe()?;
    Ok((write.into(), read.into()))
}

/// Blocks until `fd` can be read, for at most `STEP`. A signal (another
/// workload's exit, on a busy node) interrupts poll(2), which is then
/// resumed for the time left.
fn readable(fd: &impl AsRawFd, what: &str) -> Result<(), String> {
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let mut poll = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let millis = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: poll(2) reads and writes the one pollfd on this stack.
        let ready = unsafe { libc::poll(&raw mut poll, 1, millis) };
        let interrupted = ready == -1
            && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
        if ready == 1 {
            return Ok(());
        }
        if !interrupted || left.is_zero() {
            return Err(format!(
                "the sandbox's network did not come up: no {what} in time"
            ));
        }
    }
}

impl PrivateNetwork {
    /// Connects the sandbox (whose first process is `pid`, in process group
    /// `pgid`) to the outside and releases it; answers slirp4netns, which
    /// lives in the workload's process group, so it ends with the workload.
    /// It stays out of the workload's cgroups: their device list would
    /// refuse it `/dev/net/tun`.
    pub fn bring_up(self, pid: u32, pgid: i32) -> Result<Helper, String> {
        wait_for_loopback(pid)?;
        std::fs::remove_file(&self.socket).ok();
        let (ready_read, ready_write) =
            std::io::pipe().map_err(|e| format!("making a pipe: {e}"))?;
        let ready_fd = ready_write.as_raw_fd();
        let mut command = Command::new(&self.slirp4netns);
        command
            .args(["--configure", "--mtu=65520", "--disable-host-loopback"])
            .arg(format!("--ready-fd={INFO_FD}"))
            .arg("--api-socket")
            .arg(&self.socket)
            .arg(pid.to_string())
            .arg("tap0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(pgid);
        // SAFETY: between fork and exec only raw system calls on memory
        // made before the fork.
        let gid = self.gid;
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(ready_fd, INFO_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(gid) = gid
                    && (libc::setgroups(0, std::ptr::null()) < 0 || libc::setgid(gid) < 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let slirp = command
            .spawn()
            .map_err(|e| format!("starting slirp4netns: {e}"))?;
        drop(ready_write);
        // slirp4netns writes "1" once the interface is up; an end without it
        // means it failed.
        let mut ready = std::fs::File::from(OwnedFd::from(ready_read));
        readable(&ready, "network")?;
        let mut byte = [0u8; 1];
        if ready.read(&mut byte).map_err(|e| e.to_string())? == 0 {
            return Err("slirp4netns could not set up the sandbox's network".into());
        }
        if !self.forwards.is_empty() {
            // The API socket appears a moment after the network is up.
            let until = std::time::Instant::now() + STEP;
            while !self.socket.exists() {
                if std::time::Instant::now() > until {
                    return Err("the sandbox's network took no port forwards in time".into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        for port in &self.forwards {
            forward(&self.socket, *port)?;
        }
        std::fs::File::from(self.block)
            .write_all(b"1")
            .map_err(|e| {
                format!("the sandbox ended before its network was up ({e}); its output says why")
            })?;
        Ok(Helper { slirp4netns: slirp })
    }
}

/// Waits until bubblewrap has set up the sandbox's loopback (127.0.0.1 in
/// its routing table): slirp4netns configuring the same namespace at the
/// same time makes bubblewrap's netlink calls fail now and then.
fn wait_for_loopback(pid: u32) -> Result<(), String> {
    let until = std::time::Instant::now() + STEP;
    let table = format!("/proc/{pid}/net/fib_trie");
    while !std::fs::read_to_string(&table).is_ok_and(|t| t.contains("127.0.0.1")) {
        if std::time::Instant::now() > until {
            return Err("the sandbox's loopback did not come up in time".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// The sandbox's first process, from bubblewrap's info: a JSON object
/// written in pieces, whose `child-pid` comes first, while the pipe stays
/// open behind it (the caller keeps it open: bubblewrap's late writes must
/// never meet a closed pipe).
pub fn sandbox_pid(file: &mut std::fs::File) -> Result<u32, String> {
    let mut seen = Vec::new();
    loop {
        let text = String::from_utf8_lossy(&seen);
        if let Some((_, rest)) = text.split_once("\"child-pid\":") {
            let digits: String = rest
                .trim_start()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let complete = rest.trim_start().len() > digits.len();
            if complete && let Ok(pid) = digits.parse() {
                return Ok(pid);
            }
        }
        if seen.len() > 64 * 1024 {
            return Err(format!("bubblewrap said no pid: {text:?}"));
        }
        readable(file, "sandbox")?;
        let mut buffer = [0u8; 4096];
        let read = file
            .read(&mut buffer)
            .map_err(|e| format!("reading the sandbox's pid: {e}"))?;
        if read == 0 {
            return Err(format!("bubblewrap said no pid: {text:?}"));
        }
        seen.extend_from_slice(&buffer[..read]);
    }
}

/// Forwards node port `port` (on every address) to the same port inside.
fn forward(socket: &Path, port: u16) -> Result<(), String> {
    let request = serde_json::json!({
        "execute": "add_hostfwd",
        "arguments": { "proto": "tcp", "host_addr": "0.0.0.0", "host_port": port, "guest_port": port },
    });
    let answer = (|| -> std::io::Result<String> {
        let mut stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(STEP))?;
        stream.write_all(request.to_string().as_bytes())?;
        stream.shutdown(std::net::Shutdown::Write)?;
        let mut answer = String::new();
        stream.take(64 * 1024).read_to_string(&mut answer)?;
        Ok(answer)
    })()
    .map_err(|e| format!("forwarding port {port}: {e}"))?;
    if answer.contains("\"return\"") {
        Ok(())
    } else {
        Err(format!("forwarding port {port}: {answer}"))
    }
}
