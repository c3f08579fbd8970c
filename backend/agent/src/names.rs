//! A workload's names on its private network: its host name, and the
//! `/etc/hosts` that answers every workload of its network by its order's
//! name. The agent keeps that file beside the workload's root, out of its
//! reach, and shows it read-only; it is rewritten in place as workloads
//! come and go, so the read-only bind mount, which holds on to the file,
//! always shows the current table.

use std::io::Write;
use std::path::Path;

use crate::client::AssignedNetwork;

/// The host name of a workload that has no name of its own.
pub const DEFAULT_HOSTNAME: &str = "gantry";

/// A name that is safe to write into the table: a host name's characters
/// and length, whatever the server sent.
fn usable(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !name.starts_with('-')
}

/// The workload's host name: the first of the names its own address
/// answers to.
pub fn hostname(network: &AssignedNetwork) -> String {
    let own = network.address.addr();
    network
        .hosts
        .iter()
        .filter(|h| h.address == own)
        .flat_map(|h| h.names.iter())
        .find(|name| usable(name))
        .cloned()
        .unwrap_or_else(|| DEFAULT_HOSTNAME.to_owned())
}

/// The workload's `/etc/hosts`.
pub fn hosts_file(network: &AssignedNetwork) -> String {
    let own = hostname(network);
    let mut text =
        String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    if own == DEFAULT_HOSTNAME {
        text.push_str(&format!("{}\t{own}\n", network.address.addr()));
    }
    text.push_str(
        "# Workloads of this organization's private network, kept by the node's agent.\n",
    );
    for host in &network.hosts {
        let names: Vec<&str> = host
            .names
            .iter()
            .map(String::as_str)
            .filter(|n| usable(n))
            .collect();
        if !names.is_empty() {
            text.push_str(&format!("{}\t{}\n", host.address, names.join(" ")));
        }
    }
    text
}

/// Writes `text` over the file at `path` in place (the same inode), and
/// makes it readable by the workload's users; `create` says whether a
/// missing file is made or left missing.
pub fn write_in_place(path: &Path, text: &str, create: bool) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .create(create)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match opened {
        Ok(mut file) => file.write_all(text.as_bytes()),
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::NetworkHost;

    fn network(address: &str, hosts: &[(&str, &[&str])]) -> AssignedNetwork {
        AssignedNetwork {
            vni: 4096,
            address: address.parse().expect("address"),
            peers: Vec::new(),
            hosts: hosts
                .iter()
                .map(|(address, names)| NetworkHost {
                    address: address.parse().expect("address"),
                    names: names.iter().map(|n| (*n).to_owned()).collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_table_names_each_workload_and_its_own_name_is_the_host_name() {
        let gang = network(
            "198.19.0.5/24",
            &[
                ("198.19.0.4", &["train-0", "train"]),
                ("198.19.0.5", &["train-1"]),
                // Whatever could break the file's lines is left out.
                ("198.19.0.6", &["bad name", "x\n198.19.0.1 evil", "ok"]),
            ],
        );
        assert_eq!(hostname(&gang), "train-1");
        assert_eq!(
            hosts_file(&gang),
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             # Workloads of this organization's private network, kept by the node's agent.\n\
             198.19.0.4\ttrain-0 train\n198.19.0.5\ttrain-1\n198.19.0.6\tok\n"
        );
        let unnamed = network("198.19.0.7/24", &[]);
        assert_eq!(hostname(&unnamed), DEFAULT_HOSTNAME);
        assert!(hosts_file(&unnamed).contains("198.19.0.7\tgantry\n"));
    }

    #[test]
    fn the_file_is_rewritten_in_place_and_a_missing_one_is_made_only_when_asked() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("gantry-names-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("hosts");
        write_in_place(&path, "first\n", false).expect("nothing to do");
        assert!(!path.exists());
        write_in_place(&path, "a longer first table\n", true).expect("made");
        let inode = std::fs::metadata(&path).expect("file").ino();
        write_in_place(&path, "second\n", false).expect("rewritten");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "second\n");
        assert_eq!(std::fs::metadata(&path).expect("file").ino(), inode);
        std::os::unix::fs::symlink(&path, dir.join("link")).expect("link");
        assert!(write_in_place(&dir.join("link"), "x", true).is_err());
        std::fs::remove_dir_all(&dir).ok();
    }
}
