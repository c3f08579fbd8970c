//! TCP throughput (iperf3) and round-trip latency of a workload's network,
//! each beside its peer in the same run: private networks between two
//! workloads on one node and across two nodes (veth into a bridge, VXLAN
//! between nodes, the node's firewall in the path) beside the bare
//! namespaces; and the ways out of a node to a machine beside it
//! (slirp4netns as today, pasta, veth with NAT) beside the node itself.
//!
//! Everything is in network namespaces of its own: two nodes joined by a
//! bridge standing for the data centre, addresses from 198.18.0.0/15. Run
//! as root: `cargo run --release -p gantry-agent --example bench_networks`
//! (`-- --seconds 10` for longer iperf3 runs).

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gantry_agent::client::AssignedNetwork;
use gantry_agent::fabric::{Fabric, FabricConfig};

const PREFIX: &str = "gbench";
const VNI: u32 = 4100;
const NODE_1: &str = "198.18.0.11";
const NODE_2: &str = "198.18.0.12";
const ROUND_TRIPS: usize = 5_000;

fn main() {
    let seconds = std::env::args()
        .skip_while(|a| a != "--seconds")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5u32);
    let lab = Lab::new();
    let rows = lab.measure(seconds);
    drop(lab);
    println!(
        "| path | peer | Gbit/s | peer Gbit/s | ratio | RTT p50 µs | peer p50 µs | RTT p99 µs |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (path, peer, measured, base) in rows {
        println!(
            "| {path} | {peer} | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} |",
            measured.gbits,
            base.gbits,
            measured.gbits / base.gbits,
            measured.p50,
            base.p50,
            measured.p99,
        );
    }
}

struct Figures {
    gbits: f64,
    p50: f64,
    p99: f64,
}

/// The namespaces, and the processes holding what lives in them.
struct Lab {
    held: Vec<Child>,
    fabrics: Vec<std::thread::JoinHandle<()>>,
    stop: Vec<std::sync::mpsc::Sender<()>>,
}

fn path(name: &str) -> String {
    format!("/run/netns/{PREFIX}-{name}")
}

fn run(netns: Option<&str>, program: &str, args: &[&str]) -> String {
    let mut command = match netns {
        Some(name) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", path(name))).arg(program);
            c
        }
        None => Command::new(program),
    };
    let out = command.args(args).output().expect("a program");
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn spawn(netns: &str, program: &str, args: &[&str]) -> Child {
    Command::new("nsenter")
        .arg(format!("--net={}", path(netns)))
        .arg(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a program")
}

/// Moves the calling thread into namespace `name`.
fn enter(name: &str) {
    let file = File::open(path(name)).expect("a namespace");
    // SAFETY: setns(2) of this thread's network namespace only.
    let done = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(done, 0, "setns: {}", std::io::Error::last_os_error());
}

impl Lab {
    fn new() -> Self {
        let namespaces = [
            "dc", "node1", "node2", "a", "b", "w1", "w2", "w3", "slirp", "pasta", "nat",
        ];
        for name in namespaces {
            Command::new("ip")
                .args(["netns", "del", &format!("{PREFIX}-{name}")])
                .stderr(Stdio::null())
                .status()
                .ok();
            run(None, "ip", &["netns", "add", &format!("{PREFIX}-{name}")]);
            run(Some(name), "ip", &["link", "set", "lo", "up"]);
        }
        run(
            Some("dc"),
            "ip",
            &["link", "add", "fabric", "type", "bridge"],
        );
        run(
            Some("dc"),
            "ip",
            &["addr", "add", "198.18.0.1/24", "dev", "fabric"],
        );
        run(Some("dc"), "ip", &["link", "set", "fabric", "up"]);
        for (node, address) in [("node1", NODE_1), ("node2", NODE_2)] {
            link(node, "eth0", "dc", &format!("to-{node}"), address, None);
            run(
                Some("dc"),
                "ip",
                &["link", "set", &format!("to-{node}"), "master", "fabric"],
            );
            run(
                Some(node),
                "ip",
                &["route", "add", "default", "via", "198.18.0.1"],
            );
        }
        // The peer of a workload pair on one node: a veth between two
        // namespaces, nothing in between.
        link("a", "eth0", "b", "eth0", "198.18.1.1", Some("198.18.1.2"));

        let mut lab = Lab {
            held: Vec::new(),
            fabrics: Vec::new(),
            stop: Vec::new(),
        };
        let holder = |lab: &mut Lab, name: &str| -> u32 {
            let child = spawn(name, "sleep", &["3600"]);
            let pid = child.id();
            lab.held.push(child);
            wait_for(|| {
                std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()
                    != std::fs::read_link("/proc/self/ns/net").ok()
            });
            pid
        };
        let w1 = holder(&mut lab, "w1");
        let w2 = holder(&mut lab, "w2");
        let w3 = holder(&mut lab, "w3");
        lab.fabric(
            "node1",
            NODE_1,
            NODE_2,
            vec![(w1, "198.19.0.2"), (w2, "198.19.0.3")],
        );
        lab.fabric("node2", NODE_2, NODE_1, vec![(w3, "198.19.0.4")]);

        // Ways out: slirp4netns as the agent runs it, pasta, and a veth
        // with NAT on the node.
        let slirp = holder(&mut lab, "slirp");
        let helper = Command::new("nsenter")
            .arg(format!("--net={}", path("node1")))
            .args([
                "slirp4netns",
                "--configure",
                "--mtu=65520",
                "--disable-host-loopback",
            ])
            .arg(slirp.to_string())
            .arg("tap0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("slirp4netns");
        lab.held.push(helper);
        let helper = Command::new("nsenter")
            .arg(format!("--net={}", path("node1")))
            .args(["pasta", "-f", "-q", "-4", "--config-net", "--netns-only"])
            // As root it would drop to nobody, who may not enter the namespace.
            .args(["--runas", "0:0"])
            .args(["-t", "none", "-u", "none", "-T", "none", "-U", "none"])
            .args(["--netns", &path("pasta")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pasta");
        lab.held.push(helper);
        link(
            "nat",
            "eth0",
            "node1",
            "nat0",
            "198.18.2.2",
            Some("198.18.2.1"),
        );
        run(
            Some("nat"),
            "ip",
            &["route", "add", "default", "via", "198.18.2.1"],
        );
        run(Some("node1"), "sysctl", &["-qw", "net.ipv4.ip_forward=1"]);
        run(
            Some("node1"),
            "nft",
            &[
                "add table ip gbench-nat; add chain ip gbench-nat post { type nat hook postrouting priority srcnat; }; add rule ip gbench-nat post ip saddr 198.18.2.0/24 oifname eth0 masquerade",
            ],
        );
        for name in ["slirp", "pasta"] {
            wait_for(|| {
                let routes = run(Some(name), "ip", &["-4", "route", "show", "default"]);
                !routes.trim().is_empty()
            });
        }
        lab
    }

    /// Runs a fabric for node `node` (its own thread, in its namespace)
    /// with `workloads` attached, until the lab ends.
    fn fabric(&mut self, node: &str, address: &str, peer: &str, workloads: Vec<(u32, &str)>) {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let node = node.to_owned();
        let address = format!("{address}/24");
        let peer: Ipv4Addr = peer.parse().expect("a peer");
        let workloads: Vec<(u32, String)> = workloads
            .into_iter()
            .map(|(pid, a)| (pid, format!("{a}/24")))
            .collect();
        self.fabrics.push(std::thread::spawn(move || {
            enter(&node);
            let mut fabric = Fabric::new(FabricConfig {
                address: address.parse().expect("an address"),
                mtu: 1450,
                helper_gid: 199_999,
                egress: true,
            })
            .expect("the fabric");
            fabric.sync(&HashMap::from([(VNI, BTreeSet::from([peer]))]));
            for (pid, a) in workloads {
                let network = AssignedNetwork {
                    vni: VNI,
                    address: a.parse().expect("an address"),
                    peers: vec![peer],
                    hosts: Vec::new(),
                };
                fabric
                    .attach(uuid::Uuid::now_v7(), pid, &network)
                    .expect("attach");
            }
            ready_tx.send(()).ok();
            stop_rx.recv().ok();
            // The fabric's tables and links go with the namespace.
            drop(fabric);
        }));
        ready_rx.recv().expect("the fabric is up");
        self.stop.push(stop_tx);
    }

    /// Each path, then its peer right after it (these machines are noisy:
    /// only a ratio measured side by side means anything).
    fn measure(&self, seconds: u32) -> Vec<(&'static str, &'static str, Figures, Figures)> {
        let between_nodes = ("node2", NODE_2, "node1");
        let rows = [
            (
                "private network, one node",
                "veth between two namespaces",
                ("w2", "198.19.0.3", "w1"),
                ("b", "198.18.1.2", "a"),
            ),
            (
                "private network, two nodes (VXLAN)",
                "node to node",
                ("w3", "198.19.0.4", "w1"),
                between_nodes,
            ),
            (
                "out through slirp4netns (today)",
                "node to node",
                ("node2", NODE_2, "slirp"),
                between_nodes,
            ),
            (
                "out through pasta",
                "node to node",
                ("node2", NODE_2, "pasta"),
                between_nodes,
            ),
            (
                "out through veth and NAT",
                "node to node",
                ("node2", NODE_2, "nat"),
                between_nodes,
            ),
        ];
        rows.into_iter()
            .map(|(name, peer, (s, at, c), (ps, pat, pc))| {
                let measured = Figures::of(s, at, c, seconds);
                let base = Figures::of(ps, pat, pc, seconds);
                (name, peer, measured, base)
            })
            .collect()
    }
}

impl Figures {
    /// iperf3 from `client` to a server in `server` at `at`, then TCP
    /// round trips of one byte between the same two.
    fn of(server: &str, at: &str, client: &str, seconds: u32) -> Figures {
        let mut iperf = spawn(server, "iperf3", &["-s", "-B", at, "-p", "5201"]);
        std::thread::sleep(Duration::from_millis(300));
        let mut report = String::new();
        for _ in 0..50 {
            let out = Command::new("nsenter")
                .arg(format!("--net={}", path(client)))
                .args(["iperf3", "-c", at, "-p", "5201", "-J", "-t"])
                .arg(seconds.to_string())
                .output()
                .expect("iperf3");
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            // A client that came before the server answers an error.
            if out.status.success() && !text.contains("\"error\"") {
                report = text;
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        iperf.kill().ok();
        iperf.wait().ok();
        let report: serde_json::Value = serde_json::from_str(&report).unwrap_or_default();
        let gbits = report["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .unwrap_or_default()
            / 1e9;
        let (p50, p99) = round_trips(server, at, client);
        Figures { gbits, p50, p99 }
    }
}

/// Microseconds per round trip of one byte over TCP, median and 99th
/// percentile of `ROUND_TRIPS`.
fn round_trips(server: &str, at: &str, client: &str) -> (f64, f64) {
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let server = server.to_owned();
    let at_owned = at.to_owned();
    let echo = std::thread::spawn(move || {
        enter(&server);
        let listener = TcpListener::bind((at_owned.as_str(), 0)).expect("bind");
        bound_tx
            .send(listener.local_addr().expect("address").port())
            .ok();
        let (mut stream, _) = listener.accept().expect("accept");
        stream.set_nodelay(true).ok();
        let mut byte = [0u8; 1];
        while stream.read_exact(&mut byte).is_ok() {
            if stream.write_all(&byte).is_err() {
                break;
            }
        }
    });
    let port: u16 = bound_rx.recv().expect("a port");
    let client = client.to_owned();
    let at = at.to_owned();
    let mut times = std::thread::spawn(move || {
        enter(&client);
        let mut stream = TcpStream::connect((at.as_str(), port)).expect("connect");
        stream.set_nodelay(true).ok();
        let mut byte = [7u8; 1];
        let mut times = Vec::with_capacity(ROUND_TRIPS);
        for _ in 0..ROUND_TRIPS {
            let start = Instant::now();
            stream.write_all(&byte).expect("write");
            stream.read_exact(&mut byte).expect("read");
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
        times
    })
    .join()
    .expect("the client");
    echo.join().ok();
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99))
}

/// A veth pair from `a` (named `a_name`, address `a_address`/24) to `b`
/// (named `b_name`, with `b_address`/24 where given).
fn link(a: &str, a_name: &str, b: &str, b_name: &str, a_address: &str, b_address: Option<&str>) {
    run(
        Some(a),
        "ip",
        &[
            "link",
            "add",
            "name",
            a_name,
            "type",
            "veth",
            "peer",
            "name",
            b_name,
            "netns",
            &path(b),
        ],
    );
    run(
        Some(a),
        "ip",
        &["addr", "add", &format!("{a_address}/24"), "dev", a_name],
    );
    run(Some(a), "ip", &["link", "set", a_name, "up"]);
    if let Some(address) = b_address {
        run(
            Some(b),
            "ip",
            &["addr", "add", &format!("{address}/24"), "dev", b_name],
        );
    }
    run(Some(b), "ip", &["link", "set", b_name, "up"]);
}

fn wait_for(ready: impl Fn() -> bool) {
    for _ in 0..500 {
        if ready() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the lab did not come up");
}

impl Drop for Lab {
    fn drop(&mut self) {
        for stop in self.stop.drain(..) {
            stop.send(()).ok();
        }
        for fabric in self.fabrics.drain(..) {
            fabric.join().ok();
        }
        for child in &mut self.held {
            child.kill().ok();
            child.wait().ok();
        }
        for name in [
            "dc", "node1", "node2", "a", "b", "w1", "w2", "w3", "slirp", "pasta", "nat",
        ] {
            Command::new("ip")
                .args(["netns", "del", &format!("{PREFIX}-{name}")])
                .status()
                .ok();
        }
    }
}
