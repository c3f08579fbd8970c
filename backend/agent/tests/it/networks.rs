//! Private networks between nodes, with real kernels and real processes:
//! each node is a network namespace of its own with a real agent in it,
//! joined to the others by veth pairs on a bridge that stands for the data
//! centre's network (198.18.0.0/24, from the range set aside for network
//! benchmarks); the control plane is reached at 198.18.0.1. Nothing of it
//! exists outside the test's namespaces: the server and the image
//! registries, which run in the test's own namespace, are reached through
//! relays the test runs inside the namespaces.
//!
//! A tenant's two-node gang meets over its private addresses and reaches
//! nothing else: not the nodes' loopback or addresses, not the agents'
//! metrics, not the control plane, not another organization's workload on
//! the same node or the other one. That organization's workloads get a
//! network of their own, and a scan of the first one's finds nothing.

use crate::lab;
use crate::node;
use crate::support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use node::Node;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Engine, Tenant};

mod sqlite {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gang_meets_on_its_private_network_and_reaches_nothing_else_in_sandboxes() {
        super::a_gang_meets_on_its_private_network(super::Engine::Sqlite, "sandbox").await;
    }
}

mod postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_gang_meets_on_its_private_network_and_reaches_nothing_else_in_containers() {
        if crate::support::postgres_skipped() {
            return;
        }
        super::a_gang_meets_on_its_private_network(super::Engine::Postgres, "oci").await;
    }
}

/// The control plane's address on the data centre's network.
const CONTROL_PLANE: &str = "198.18.0.1";
/// Where organizations' private networks are cut from.
const POOL: &str = "198.19.0.0/16";
/// A port something listens on in every node's own namespace (its
/// loopback and its address): what a workload must not reach on a node.
const NODE_SERVICE: u16 = 7100;
/// The agents' metrics port.
const METRICS: u16 = 9400;

/// Network namespaces standing for a data centre: `dc` holds its bridge
/// and the control plane's address, each node one end of a veth pair on
/// it.
struct Datacenter {
    names: Vec<String>,
    /// Listeners on the nodes' own services, killed at the end.
    services: Vec<Child>,
}

impl Datacenter {
    fn new(nodes: usize) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "gt{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut names = vec![format!("{tag}dc")];
        names.extend((1..=nodes).map(|i| format!("{tag}n{i}")));
        let lab = Datacenter {
            names,
            services: Vec::new(),
        };
        for name in &lab.names {
            ip(&["netns", "add", name]);
            ip(&["-n", name, "link", "set", "lo", "up"]);
        }
        let dc = lab.names[0].clone();
        ip(&["-n", &dc, "link", "add", "name", "fabric", "type", "bridge"]);
        ip(&[
            "-n",
            &dc,
            "addr",
            "add",
            &format!("{CONTROL_PLANE}/24"),
            "dev",
            "fabric",
        ]);
        ip(&["-n", &dc, "link", "set", "fabric", "up"]);
        for i in 1..=nodes {
            let node = &lab.names[i];
            let port = format!("port{i}");
            ip(&[
                "-n", &dc, "link", "add", "name", &port, "type", "veth", "peer", "name", "eth0",
                "netns", node,
            ]);
            ip(&["-n", &dc, "link", "set", &port, "master", "fabric", "up"]);
            ip(&[
                "-n",
                node,
                "addr",
                "add",
                &format!("{}/24", lab.address(i)),
                "dev",
                "eth0",
            ]);
            ip(&["-n", node, "link", "set", "eth0", "up"]);
        }
        lab
    }

    /// Node `i`'s address (from 1).
    fn address(&self, i: usize) -> String {
        format!("198.18.0.{}", 10 + i)
    }

    fn namespace(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Relays `listen` inside namespace `i` (0: the data centre) to
    /// `target` in the test's own namespace.
    fn relay(&self, i: usize, listen: &str, target: &str) {
        let path = format!("/run/netns/{}", self.names[i]);
        let ours = std::fs::File::open("/proc/self/ns/net").expect("our namespace");
        let theirs = std::fs::File::open(path).expect("the namespace");
        let (listen, target) = (listen.to_owned(), target.to_owned());
        let (ready, bound) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            enter(&theirs);
            let listener = TcpListener::bind(&listen).expect("bind the relay");
            ready.send(()).ok();
            for client in listener.incoming().flatten() {
                let ours = ours.try_clone().expect("our namespace");
                let target = target.clone();
                // Threads start in their parent's namespace: each one
                // goes back to ours before it connects.
                std::thread::spawn(move || {
                    enter(&ours);
                    if let Ok(server) = TcpStream::connect(&target) {
                        pipe(client, server);
                    }
                });
            }
        });
        bound.recv().expect("the relay is listening");
    }

    /// A listener on `NODE_SERVICE` on every address of node `i`'s own
    /// namespace that answers whoever connects.
    fn node_service(&mut self, i: usize) {
        let child = Command::new("ip")
            .args(["netns", "exec", self.namespace(i), "python3", "-c"])
            .arg(format!(
                "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
                 s.bind(('0.0.0.0',{NODE_SERVICE}))\ns.listen()\nwhile True:\n c,_=s.accept()\n c.send(b'node')\n c.close()"
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("a node service");
        self.services.push(child);
    }
}

impl Drop for Datacenter {
    fn drop(&mut self) {
        for service in &mut self.services {
            service.kill().ok();
            service.wait().ok();
        }
        for name in &self.names {
            Command::new("ip")
                .args(["netns", "del", name])
                .status()
                .ok();
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Moves the calling thread into the network namespace `file` names.
fn enter(file: &std::fs::File) {
    // SAFETY: setns(2) on a descriptor this thread holds open.
    let entered = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(entered, 0, "setns: {}", std::io::Error::last_os_error());
}

/// Copies both ways until either side closes.
fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(mut a2), Ok(mut b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let forward = std::thread::spawn(move || {
        let (mut a, mut b) = (a, b);
        copy(&mut a, &mut b);
    });
    copy(&mut b2, &mut a2);
    forward.join().ok();
}

fn copy(from: &mut TcpStream, to: &mut TcpStream) {
    let mut buffer = [0u8; 16 * 1024];
    while let Ok(read) = from.read(&mut buffer) {
        if read == 0 || to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    to.shutdown(std::net::Shutdown::Write).ok();
}

/// What each rank of the gang runs: rank 0 waits for rank 1 on the
/// rendezvous and keeps a service of its own open; rank 1 meets it, says
/// what the gang's names and another organization's order's resolve to,
/// then tries every address of `$PROBES` (`name,host,port` …) and says
/// what it reached.
const GANG: &str = r#"python3 - <<'EOF'
import os, socket, time
rank = int(os.environ["NODE_RANK"])
master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print(f"rank={rank} host={socket.gethostname()} address={os.environ.get('GANTRY_PRIVATE_ADDRESS')} master={master} port={port}", flush=True)
def reach(name, host, p):
    try:
        socket.create_connection((host, int(p)), timeout=2).close()
        return "yes"
    except OSError:
        return "no"
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen()
    s.settimeout(90)
    c, peer = s.accept()
    print(f"rank 0 got {c.recv(64).decode()} from {peer[0]}", flush=True)
    time.sleep(int(os.environ["LINGER"]))
else:
    for _ in range(300):
        try:
            c = socket.create_connection((master, port), timeout=2)
            break
        except OSError:
            time.sleep(0.2)
    c.sendall(b"hello-from-rank-1")
    c.close()
    def resolve(name):
        try:
            return socket.gethostbyname(name)
        except OSError:
            return "none"
    names = " ".join(f"{n}={resolve(n)}" for n in ("train-0", "train", "train-1", "rival"))
    print(f"names {names}", flush=True)
    for probe in os.environ["PROBES"].split():
        name, host, p = probe.split(",")
        print(f"reach {name}: {reach(name, host, p)}", flush=True)
EOF"#;

/// Another organization's workload: says its address, scans `$SCAN`
/// (`host,port` …) and then serves on port 7000 for `$LINGER` seconds.
const NEIGHBOUR: &str = r#"python3 - <<'EOF'
import os, socket, time
print(f"address={os.environ.get('GANTRY_PRIVATE_ADDRESS')}", flush=True)
found = []
for target in os.environ.get("SCAN", "").split():
    host, p = target.split(",")
    try:
        socket.create_connection((host, int(p)), timeout=1).close()
        found.append(target)
    except OSError:
        pass
print(f"found={found}", flush=True)
s = socket.socket()
s.bind(("0.0.0.0", 7000))
s.listen()
s.settimeout(int(os.environ["LINGER"]))
try:
    s.accept()
except OSError:
    pass
EOF"#;

async fn a_gang_meets_on_its_private_network(engine: Engine, runtime: &str) {
    let node = Node::new_with(engine, |config| {
        config.private_networks = POOL.into();
        config.private_network_prefix = 24;
    })
    .await;
    let mut dc = Datacenter::new(2);
    let server_port = node
        .server
        .base
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    dc.relay(
        0,
        &format!("{CONTROL_PLANE}:{server_port}"),
        &format!("127.0.0.1:{server_port}"),
    );
    let registries = node::registries();
    for i in 1..=2 {
        for registry in [&registries.open, &registries.private] {
            dc.relay(i, registry, registry);
        }
        dc.node_service(i);
    }
    let eight = node
        .server
        .post(
            "/api/v1/admin/catalog/instance-types",
            &node.operator,
            json!({ "name": "h100x8", "gpu_model": "H100-SXM-80GB", "gpus_per_node": 8, "vcpus": 1, "memory_gib": 1 }),
        )
        .await;
    eight.expect(StatusCode::CREATED);
    node.server
        .post(
            &format!(
                "/api/v1/admin/catalog/instance-types/{}/prices",
                eight.id("/id")
            ),
            &node.operator,
            json!({ "pricing_class": "on_demand", "hourly_micros": 20_000_000 }),
        )
        .await
        .expect(StatusCode::CREATED);
    let _agents: Vec<lab::Agent> = (1..=2)
        .map(|i| {
            // nsenter, not `ip netns exec`: that one mounts a /sys of its
            // own, without the cgroup file systems.
            let mut command = Command::new("nsenter");
            command
                .arg(format!("--net=/run/netns/{}", dc.namespace(i)))
                .arg(env!("CARGO_BIN_EXE_gantry-agent"))
                .env("GANTRY_JOIN_TOKEN", &node.token)
                .args(["--server", &format!("http://{CONTROL_PLANE}:{server_port}")])
                .args(["--name", &format!("gpu-box-{i}"), "--runtime", runtime])
                .args([
                    "--simulate-gpus",
                    "10xH100-SXM-80GB",
                    "--interval-ms",
                    "100",
                ])
                .arg("--state-dir")
                .arg(node.dir.join(format!("state-{i}")))
                .args(["--fabric-address", &format!("{}/24", dc.address(i))])
                .args(["--metrics-listen", &format!("0.0.0.0:{METRICS}")])
                .stdout(Stdio::null());
            node.spawn_share(command, u32::try_from(i - 1).unwrap_or(0), 2)
        })
        .collect();
    wait_for_nodes(&node, 2).await;

    // Another organization's workload on the first node, before the gang.
    let neighbour = node.server.signup("neighbour").await;
    let first = job(
        &node,
        &neighbour,
        "rival",
        1,
        NEIGHBOUR,
        json!({ "LINGER": "120" }),
    )
    .await;
    let first_address = address_of(&node, &neighbour, first, "address=").await;

    let tenant = node.server.signup("gang").await;
    let mut probes = vec![
        format!("neighbour-private,{first_address},7000"),
        format!("control-plane,{CONTROL_PLANE},{server_port}"),
        format!("node-loopback,10.0.2.2,{NODE_SERVICE}"),
    ];
    for i in 1..=2 {
        let at = dc.address(i);
        probes.push(format!("node-{i},{at},{NODE_SERVICE}"));
        probes.push(format!("metrics-{i},{at},{METRICS}"));
        probes.push(format!("neighbour-via-node-{i},{at},7000"));
    }
    let gang = node
        .server
        .order(
            &tenant,
            json!({
                "name": "train",
                "instance_type": "h100x8",
                "node_count": 2,
                "job": {
                    "command": GANG,
                    "env": { "PROBES": probes.join(" "), "LINGER": "20" },
                },
            }),
        )
        .await;
    printed_starting(&node, &tenant, gang, "rank 0 got").await;
    // Each node's agent sends its own lines: rank 1's may land after rank 0's.
    let met = printed_starting(&node, &tenant, gang, "rank=1 ").await;
    let ranks: Vec<&String> = met.iter().filter(|l| l.starts_with("rank=")).collect();
    assert_eq!(ranks.len(), 2, "{met:?}");
    let address = |rank: usize| {
        ranks
            .iter()
            .find(|l| l.starts_with(&format!("rank={rank} ")))
            .and_then(|l| l.split("address=").nth(1))
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_default()
            .to_owned()
    };
    let (zero, one) = (address(0), address(1));
    assert!(
        zero.starts_with("198.19.") && one.starts_with("198.19."),
        "{met:?}"
    );
    assert!(
        ranks.iter().all(|l| l.contains(&format!("master={zero} "))),
        "the rendezvous is rank 0's private address: {met:?}"
    );
    assert!(
        met.contains(&format!("rank 0 got hello-from-rank-1 from {one}")),
        "rank 1 reached rank 0 from its private address: {met:?}"
    );
    for rank in 0..2 {
        assert!(
            ranks
                .iter()
                .any(|l| l.starts_with(&format!("rank={rank} host=train-{rank} "))),
            "each rank's host name is the order's name and its rank: {met:?}"
        );
    }
    assert_ne!(
        network_of(&zero),
        network_of(&first_address),
        "each organization has a network of its own"
    );

    // The API shows each node's workload its private address, and the
    // organization its network with both; another organization sees
    // neither, and operators see both organizations' networks.
    let order = node.order(&tenant, gang).await;
    let mut shown: Vec<String> = order["access"]["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["private_address"].as_str().map(str::to_owned))
        .collect();
    shown.sort();
    let mut both = vec![zero.clone(), one.clone()];
    both.sort();
    assert_eq!(shown, both, "{order}");
    let networks = node
        .server
        .get(
            &format!("/api/v1/orgs/{}/networks", tenant.org_id),
            &tenant.token,
        )
        .await;
    let items = networks.items();
    assert_eq!(items.len(), 1, "{:?}", networks.body);
    assert_eq!(items[0]["cidr"], format!("{}.0/24", network_of(&zero)));
    let mut listed: Vec<String> = items[0]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["address"].as_str().map(str::to_owned))
        .collect();
    listed.sort();
    assert_eq!(listed, both, "{:?}", networks.body);
    node.server
        .get(
            &format!("/api/v1/orgs/{}/networks", tenant.org_id),
            &neighbour.token,
        )
        .await
        .expect(StatusCode::NOT_FOUND);
    let all = node
        .server
        .get("/api/v1/admin/networks", &node.operator)
        .await;
    assert_eq!(all.items().len(), 2, "{:?}", all.body);

    // The second organization scans the gang's network from the second
    // node while the gang is still there.
    let mut scan: Vec<String> = (1..=16)
        .map(|host| format!("{},7000", host_in(&zero, host)))
        .collect();
    scan.push(format!("{zero},{}", master_port(&met)));
    scan.push(format!("{one},22"));
    let second = job(
        &node,
        &neighbour,
        "scanner",
        1,
        NEIGHBOUR,
        json!({ "SCAN": scan.join(" "), "LINGER": "1" }),
    )
    .await;
    let found = printed_starting(&node, &neighbour, second, "found=").await;
    assert!(found.contains(&"found=[]".to_owned()), "{found:?}");

    let ended = wait_ended(&node, &tenant, gang).await;
    assert_eq!(ended["status"], "completed", "{ended}");
    let lines = node.output(&tenant, gang).await;
    assert!(
        lines.contains(&format!(
            "names train-0={zero} train={zero} train-1={one} rival=none"
        )),
        "the gang's names answer with its private addresses, and another \
         organization's do not answer: {lines:?}"
    );
    let reached: Vec<&String> = lines.iter().filter(|l| l.starts_with("reach ")).collect();
    assert_eq!(reached.len(), probes.len(), "{lines:?}");
    for line in reached {
        assert!(
            line.ends_with(": no"),
            "the gang reached more than itself: {lines:?}"
        );
    }
}

/// Orders a job called `name` of `nodes` nodes running `command` with
/// `env`.
async fn job(
    node: &Node,
    tenant: &Tenant,
    name: &str,
    nodes: u32,
    command: &str,
    env: Value,
) -> uuid::Uuid {
    node.server
        .order(
            tenant,
            json!({
                "name": name,
                "instance_type": "h100x2",
                "node_count": nodes,
                "job": { "command": command, "env": env },
            }),
        )
        .await
}

async fn wait_for_nodes(node: &Node, count: usize) {
    assert!(
        lab::nodes_ready(&node.server, &node.operator, count).await,
        "the agents never registered: {}",
        node.agent_log()
    );
}

/// The output of `order` once a line starts with `prefix`.
async fn printed_starting(
    node: &Node,
    tenant: &Tenant,
    order: uuid::Uuid,
    prefix: &str,
) -> Vec<String> {
    for _ in 0..1200 {
        let lines = node.output(tenant, order).await;
        if lines.iter().any(|l| l.starts_with(prefix)) {
            return lines;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "order {order} never printed {prefix:?}: {}\n{:?}\nagents: {}",
        node.order(tenant, order).await,
        node.output(tenant, order).await,
        node.agent_log()
    );
}

async fn address_of(node: &Node, tenant: &Tenant, order: uuid::Uuid, prefix: &str) -> String {
    let lines = printed_starting(node, tenant, order, prefix).await;
    let line = lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .cloned()
        .unwrap_or_default();
    let address = line.trim_start_matches(prefix).to_owned();
    assert!(
        address.starts_with("198.19."),
        "no private address: {lines:?}"
    );
    address
}

async fn wait_ended(node: &Node, tenant: &Tenant, order: uuid::Uuid) -> Value {
    for _ in 0..1200 {
        let current = node.order(tenant, order).await;
        if current["ended_at"].is_string() {
            return current;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "order {order} never ended: {:?}",
        node.output(tenant, order).await
    );
}

/// The /24 an address is in (the test's pool is cut in /24s).
fn network_of(address: &str) -> String {
    address
        .rsplit_once('.')
        .map(|(net, _)| net.to_owned())
        .unwrap_or_default()
}

fn host_in(address: &str, host: u8) -> String {
    format!("{}.{host}", network_of(address))
}

fn master_port(lines: &[String]) -> String {
    lines
        .iter()
        .find_map(|l| l.split(" port=").nth(1))
        .unwrap_or_default()
        .to_owned()
}
