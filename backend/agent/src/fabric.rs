//! Private networks on a node: each organization's network is a bridge
//! (`gb<vni>`) joined to the same network on other nodes by a VXLAN device
//! (`gx<vni>`, from the node's fabric address, with a flood entry per peer
//! node and no learning), and each workload on it a veth pair whose inner
//! end is its `eth0`. The bridges have no address: the node is not on
//! them, so a workload reaches nothing of the node through them, and
//! different organizations' networks share no bridge.
//!
//! nftables holds the rest (table `gantry`, bridge and inet):
//! - a workload's port passes only ARP and IPv4 frames whose source
//!   address and MAC are the ones it was given (no ARP or IP spoofing, no
//!   IPv6 router advertisements, no DHCP answers), and nothing from a port
//!   reaches the node itself;
//! - VXLAN is taken only from peer nodes;
//! - the user-mode NAT that gives workloads the internet (slirp4netns,
//!   which runs under `helper_gid`) opens nothing to the data centre's
//!   network or to the node's own addresses, so a workload cannot send a
//!   forged VXLAN packet, nor reach agents, the control plane or other
//!   tenants' workloads by their nodes' addresses; where the operator
//!   keeps workloads off the internet (`egress` off), it opens nothing at
//!   all, while connections to exposed ports still come in.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use ipnet::Ipv4Net;
use uuid::Uuid;

use crate::client::AssignedNetwork;

/// VXLAN's registered port.
const VXLAN_PORT: u16 = 4789;
/// The nftables tables' name (one bridge and one inet table).
const TABLE: &str = "gantry";

/// What the node needs to carry private networks.
#[derive(Debug, Clone)]
pub struct FabricConfig {
    /// The node's address on the data centre's network, and that
    /// network's prefix: workloads' NAT may reach nothing of it.
    pub address: Ipv4Net,
    /// The MTU of workloads' private interfaces: the fabric's, less
    /// VXLAN's 50 bytes.
    pub mtu: u32,
    /// The group slirp4netns runs as, so the firewall can tell its
    /// traffic from the node's own.
    pub helper_gid: u32,
    /// Whether workloads reach the internet through their NAT.
    pub egress: bool,
}

/// The node's private networks as they stand.
pub struct Fabric {
    config: FabricConfig,
    /// Networks set up here, each with the peers it floods to.
    networks: HashMap<u32, BTreeSet<Ipv4Addr>>,
    /// Each attached workload's port entry in the firewall.
    ports: HashMap<Uuid, String>,
    /// Whether the ports' rules are written.
    ports_guarded: bool,
}

/// The interface names of `vni`'s bridge and VXLAN device.
fn bridge(vni: u32) -> String {
    format!("gb{vni}")
}

fn vxlan(vni: u32) -> String {
    format!("gx{vni}")
}

/// A workload's veth ends (node side, and inside before it is renamed):
/// the random tail of its order's id, so two workloads never share one.
fn veth(id: Uuid) -> (String, String) {
    let hex = id.simple().to_string();
    let tail = &hex[hex.len() - 12..];
    (format!("gw{tail}"), format!("gp{tail}"))
}

/// A workload's MAC: locally administered, from its address, so the
/// firewall knows it without asking.
fn mac(address: Ipv4Addr) -> String {
    let [a, b, c, d] = address.octets();
    format!("02:47:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// Runs `program` with `args`, `input` on its standard input; answers its
/// complaint on failure.
fn run(program: &str, args: &[&str], input: &str) -> Result<(), String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {program}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| format!("talking to {program}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("running {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Turns IPv6 off on one of the node's interfaces: a link-local address
/// there would put the node on the bridge.
fn no_ipv6(interface: &str) -> Result<(), String> {
    std::fs::write(
        format!("/proc/sys/net/ipv6/conf/{interface}/disable_ipv6"),
        "1",
    )
    .or_else(|e| {
        // A kernel without IPv6 has nothing to turn off.
        if e.kind() == std::io::ErrorKind::NotFound {
            Ok(())
        } else {
            Err(format!("turning IPv6 off on {interface}: {e}"))
        }
    })
}

/// The workloads' ports' rules.
fn bridge_rules() -> String {
    format!(
        "table bridge {TABLE} {{
  set ports {{ type ifname . ether_addr . ipv4_addr; }}
  chain forward {{
    type filter hook forward priority 0; policy accept;
    iifname \"gw*\" jump from_workload
  }}
  chain input {{
    type filter hook input priority 0; policy accept;
    iifname \"gw*\" drop
  }}
  chain from_workload {{
    ether type arp iifname . ether saddr . arp saddr ip @ports iifname . arp saddr ether . arp saddr ip @ports accept
    ether type ip udp sport 67 drop
    ether type ip iifname . ether saddr . ip saddr @ports accept
    drop
  }}
}}
"
    )
}

/// The node's own rules: VXLAN from peers only, the NAT kept off the data
/// centre's network and the node.
fn node_rules(config: &FabricConfig) -> String {
    let gid = config.helper_gid;
    let fabric = config.address.trunc();
    let nat = if config.egress {
        format!(
            "meta skgid {gid} ct state new ip daddr {fabric} drop
    meta skgid {gid} ct state new fib daddr type local drop"
        )
    } else {
        format!("meta skgid {gid} ct state new drop")
    };
    format!(
        "table inet {TABLE} {{
  set peers {{ type ipv4_addr; }}
  chain output {{
    type filter hook output priority 0; policy accept;
    {nat}
  }}
  chain input {{
    type filter hook input priority 0; policy accept;
    udp dport {VXLAN_PORT} ip saddr != @peers drop
  }}
}}
"
    )
}

impl Fabric {
    /// Sets the node's firewall up; networks come as workloads need them.
    pub fn new(config: FabricConfig) -> Result<Self, String> {
        // Whatever an earlier run of the agent left goes first.
        for family in ["bridge", "inet"] {
            run("nft", &["delete", "table", family, TABLE], "").ok();
        }
        run("nft", &["-f", "-"], &node_rules(&config))?;
        Ok(Fabric {
            config,
            networks: HashMap::new(),
            ports: HashMap::new(),
            ports_guarded: false,
        })
    }

    /// Writes the ports' rules once a bridge exists: a bridge table made
    /// in a network namespace that has no bridge yet is never called for
    /// the bridges made after it (seen on Linux 6.18).
    fn guard_ports(&mut self) -> Result<(), String> {
        if !self.ports_guarded {
            run("nft", &["-f", "-"], &bridge_rules())?;
            self.ports_guarded = true;
        }
        Ok(())
    }

    pub fn helper_gid(&self) -> u32 {
        self.config.helper_gid
    }

    /// Makes the node's networks what `wanted` (each network its
    /// workloads here are on, with its peers) says: new ones set up, peers
    /// added and dropped, networks no workload here is on removed.
    pub fn sync(&mut self, wanted: &HashMap<u32, BTreeSet<Ipv4Addr>>) {
        let gone: Vec<u32> = self
            .networks
            .keys()
            .filter(|vni| !wanted.contains_key(vni))
            .copied()
            .collect();
        for vni in gone {
            if let Err(error) = run("ip", &["link", "del", &bridge(vni)], "")
                .and_then(|()| run("ip", &["link", "del", &vxlan(vni)], ""))
            {
                tracing::warn!(vni, %error, "cannot remove a private network");
            }
            self.networks.remove(&vni);
        }
        for (vni, peers) in wanted {
            if !self.networks.contains_key(vni) {
                match self.create(*vni) {
                    Ok(()) => {
                        self.networks.insert(*vni, BTreeSet::new());
                    }
                    Err(error) => {
                        tracing::warn!(vni, %error, "cannot set up a private network");
                        continue;
                    }
                }
            }
            let Some(current) = self.networks.get_mut(vni) else {
                continue;
            };
            let mut commands = String::new();
            for peer in peers.difference(current) {
                commands.push_str(&format!(
                    "fdb append 00:00:00:00:00:00 dev {} dst {peer}\n",
                    vxlan(*vni)
                ));
            }
            for peer in current.difference(peers) {
                commands.push_str(&format!(
                    "fdb del 00:00:00:00:00:00 dev {} dst {peer}\n",
                    vxlan(*vni)
                ));
            }
            if commands.is_empty() {
                continue;
            }
            // Entries an earlier run of the agent left are there already:
            // -force goes on past them.
            if let Err(error) = run("bridge", &["-force", "-batch", "-"], &commands) {
                tracing::debug!(vni, %error, "some of a network's peers were set already");
            }
            current.clone_from(peers);
        }
        let all: BTreeSet<Ipv4Addr> = wanted.values().flatten().copied().collect();
        let elements: Vec<String> = all.iter().map(Ipv4Addr::to_string).collect();
        let mut update = format!("flush set inet {TABLE} peers\n");
        if !elements.is_empty() {
            update.push_str(&format!(
                "add element inet {TABLE} peers {{ {} }}\n",
                elements.join(", ")
            ));
        }
        if let Err(error) = run("nft", &["-f", "-"], &update) {
            tracing::warn!(%error, "cannot update the fabric's peers");
        }
    }

    /// Sets up `vni`'s bridge and VXLAN device.
    fn create(&mut self, vni: u32) -> Result<(), String> {
        let (bridge, vxlan) = (bridge(vni), vxlan(vni));
        // An earlier run of the agent's: its workloads may still be on it.
        if run("ip", &["link", "show", "dev", &vxlan], "").is_ok() {
            return self.guard_ports();
        }
        run("ip", &["link", "del", &bridge], "").ok();
        let local = self.config.address.addr().to_string();
        let mtu = self.config.mtu.to_string();
        run(
            "ip",
            &["link", "add", "name", &bridge, "type", "bridge"],
            "",
        )?;
        no_ipv6(&bridge)?;
        run(
            "ip",
            &[
                "link",
                "add",
                "name",
                &vxlan,
                "mtu",
                &mtu,
                "type",
                "vxlan",
                "id",
                &vni.to_string(),
                "local",
                &local,
                "dstport",
                &VXLAN_PORT.to_string(),
                "nolearning",
            ],
            "",
        )?;
        no_ipv6(&vxlan)?;
        run(
            "ip",
            &["-batch", "-"],
            &format!("link set {vxlan} master {bridge} up\nlink set {bridge} up\n"),
        )?;
        self.guard_ports()
    }

    /// Gives the workload `id`, whose network namespace holds process
    /// `pid`, its address on `network` as `eth0`.
    pub fn attach(&mut self, id: Uuid, pid: u32, network: &AssignedNetwork) -> Result<(), String> {
        if !self.networks.contains_key(&network.vni) {
            let peers = network.peers.iter().copied().collect();
            let mut wanted: HashMap<u32, BTreeSet<Ipv4Addr>> = self.networks.clone();
            wanted.insert(network.vni, peers);
            self.sync(&wanted);
        }
        if !self.networks.contains_key(&network.vni) {
            return Err("the private network could not be set up on this node".into());
        }
        let (outside, inside) = veth(id);
        let address = network.address.addr();
        let mac = mac(address);
        let mtu = self.config.mtu;
        run("ip", &["link", "del", &outside], "").ok();
        run(
            "ip",
            &["-batch", "-"],
            &format!(
                "link add name {outside} mtu {mtu} type veth peer name {inside} mtu {mtu}\n\
                 link set {inside} address {mac} netns {pid}\n"
            ),
        )?;
        no_ipv6(&outside)?;
        let port = format!("\"{outside}\" . {mac} . {address}");
        run(
            "nft",
            &["-f", "-"],
            &format!("add element bridge {TABLE} ports {{ {port} }}\n"),
        )?;
        self.ports.insert(id, port);
        run(
            "ip",
            &[
                "link",
                "set",
                &outside,
                "master",
                &bridge(network.vni),
                "up",
            ],
            "",
        )?;
        let namespace = format!("--net=/proc/{pid}/ns/net");
        run(
            "nsenter",
            &[&namespace, "ip", "-batch", "-"],
            &format!(
                "link set {inside} name eth0\n\
                 addr add {} dev eth0\n\
                 link set eth0 up\n",
                network.address
            ),
        )
    }

    /// Lets the port of workload `id`, which an earlier run of the agent
    /// attached, pass again (the firewall was written anew at start).
    pub fn readopt(&mut self, id: Uuid, network: &AssignedNetwork) {
        if let Err(error) = self.guard_ports() {
            tracing::warn!(%error, "cannot guard workloads' ports");
            return;
        }
        let (outside, _) = veth(id);
        let address = network.address.addr();
        let port = format!("\"{outside}\" . {} . {address}", mac(address));
        match run(
            "nft",
            &["-f", "-"],
            &format!("add element bridge {TABLE} ports {{ {port} }}\n"),
        ) {
            Ok(()) => {
                self.ports.insert(id, port);
            }
            Err(error) => tracing::warn!(order = %id, %error, "cannot take a workload's port back"),
        }
    }

    /// Forgets the workload `id`'s port: its veth pair went with its
    /// network namespace.
    pub fn detach(&mut self, id: Uuid) {
        let Some(port) = self.ports.remove(&id) else {
            return;
        };
        let (outside, _) = veth(id);
        run("ip", &["link", "del", &outside], "").ok();
        if let Err(error) = run(
            "nft",
            &["-f", "-"],
            &format!("delete element bridge {TABLE} ports {{ {port} }}\n"),
        ) {
            tracing::warn!(order = %id, %error, "cannot forget a workload's port");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernels_fifteen_characters_and_differ_per_order() {
        let a = Uuid::parse_str("01890a5d-ac96-774b-bcce-b302099a8057").expect("id");
        let b = Uuid::parse_str("01890a5d-ac96-774b-bcce-b302099a8058").expect("id");
        let (outside, inside) = veth(a);
        assert_eq!(outside, "gwb302099a8057");
        assert_eq!(inside, "gpb302099a8057");
        assert_ne!(veth(b).0, outside);
        assert!(bridge(16_777_215).len() <= 15 && vxlan(16_777_215).len() <= 15);
        assert_eq!(mac([198, 18, 16, 5].into()), "02:47:c6:12:10:05");
    }
}
