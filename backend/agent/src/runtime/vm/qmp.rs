//! The QEMU Machine Protocol, as the agent uses it: one connection per
//! command over the VM's socket, which outlives the agent, so a restarted
//! agent drives the VMs it finds exactly as the one that started them.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

/// How long QEMU has to answer one command.
const ANSWER: Duration = Duration::from_secs(5);

/// Connects through the socket's directory, held open: a socket's path
/// must be short (108 bytes) and a state directory's may not be.
fn connect(socket: &Path) -> std::io::Result<UnixStream> {
    use std::os::fd::AsRawFd;
    let dir = socket.parent().unwrap_or(Path::new("/"));
    let name = socket.file_name().unwrap_or_default();
    let held = std::fs::File::open(dir)?;
    let short = Path::new("/proc/self/fd")
        .join(held.as_raw_fd().to_string())
        .join(name);
    UnixStream::connect(short)
}

/// Runs `command` and answers its `return` value.
pub fn execute(socket: &Path, command: &str) -> Result<Value, String> {
    let fail = |e: &dyn std::fmt::Display| format!("QMP {command}: {e}");
    let stream = connect(socket).map_err(|e| fail(&e))?;
    stream
        .set_read_timeout(Some(ANSWER))
        .map_err(|e| fail(&e))?;
    let mut writer = stream.try_clone().map_err(|e| fail(&e))?;
    let mut lines = BufReader::new(stream).lines();
    // The greeting, then capabilities negotiation, then the command;
    // events that arrive in between are passed over.
    let mut answer = || -> Result<Value, String> {
        loop {
            let line = lines
                .next()
                .ok_or_else(|| fail(&"QEMU closed the socket"))?
                .map_err(|e| fail(&e))?;
            let message: Value = serde_json::from_str(&line).map_err(|e| fail(&e))?;
            if let Some(error) = message.get("error") {
                return Err(fail(&error["desc"].as_str().unwrap_or("an error")));
            }
            if message.get("return").is_some() || message.get("QMP").is_some() {
                return Ok(message);
            }
        }
    };
    answer()?;
    for request in [
        json!({ "execute": "qmp_capabilities" }),
        json!({ "execute": command }),
    ] {
        writer
            .write_all(format!("{request}\n").as_bytes())
            .map_err(|e| fail(&e))?;
        let reply = answer()?;
        if request["execute"] == command {
            return Ok(reply["return"].clone());
        }
    }
    Err(fail(&"no answer"))
}
