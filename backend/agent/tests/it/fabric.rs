//! The node's side of private networks, attacked as a workload with every
//! capability in its own network namespace would attack it (workloads have
//! no `CAP_NET_RAW` or `CAP_NET_ADMIN`; this test gives them both, to show
//! the firewall holds on its own): forged source addresses, ARP answers
//! for another's address, DHCP and router advertisement answers, and a
//! VXLAN packet forged by a machine that is not a peer. Each attack is
//! paired with the same packet sent honestly, which arrives, so a drop is
//! the firewall's doing and not a broken test. The walls also stand after
//! the agent restarts and takes its workloads' ports back, and the
//! workloads' NAT reaches the internet (or, with egress off, nothing) but
//! never the data centre's network.
//!
//! Everything happens in network namespaces of the test's own: the node,
//! its workloads (each a process holding a namespace) and an outsider on
//! the node's data-centre link; addresses are from 198.18.0.0/15.

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gantry_agent::client::AssignedNetwork;
use gantry_agent::fabric::{Fabric, FabricConfig};
use uuid::Uuid;

const VNI: u32 = 4321;
const NODE: &str = "198.18.0.11";
const OUTSIDER: &str = "198.18.0.20";
const ATTACKER: &str = "198.19.0.2";
const VICTIM: &str = "198.19.0.3";
/// The group the workloads' NAT runs as.
const HELPER_GID: u32 = 199_999;
/// An address beyond the data centre's network: the internet.
const INTERNET: &str = "198.18.200.1";
/// An address no one on the network holds.
const UNUSED: &str = "198.19.0.9";

/// A process holding a network namespace of its own.
struct Namespace(Child);

impl Namespace {
    fn new() -> Self {
        let child = Command::new("unshare")
            .args(["--net", "sleep", "600"])
            .spawn()
            .expect("unshare");
        let namespace = Namespace(child);
        // unshare has made the namespace once /proc shows it differs.
        let ours = std::fs::read_link("/proc/thread-self/ns/net").expect("our namespace");
        for _ in 0..200 {
            if std::fs::read_link(namespace.path()).is_ok_and(|theirs| theirs != ours) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        namespace
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn path(&self) -> String {
        format!("/proc/{}/ns/net", self.pid())
    }

    /// Runs `program` inside; answers its standard output.
    fn run(&self, program: &str, args: &[&str]) -> String {
        let out = Command::new("nsenter")
            .arg(format!("--net={}", self.path()))
            .arg(program)
            .args(args)
            .output()
            .expect("nsenter");
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `script` (Python) inside, in the background.
    fn spawn_python(&self, script: &str) -> Child {
        Command::new("nsenter")
            .arg(format!("--net={}", self.path()))
            .args(["python3", "-c", script])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python")
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// The node's fabric, its workloads' NAT reaching the internet or not.
fn node_config(egress: bool) -> FabricConfig {
    FabricConfig {
        address: format!("{NODE}/24").parse().expect("address"),
        mtu: 1450,
        helper_gid: HELPER_GID,
        egress,
    }
}

/// Moves the calling thread into a new network namespace: the node.
fn become_node() {
    // SAFETY: unshare(2) of this thread's network namespace only.
    let done = unsafe { libc::unshare(libc::CLONE_NEWNET) };
    assert_eq!(done, 0, "unshare: {}", std::io::Error::last_os_error());
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A UDP listener on `port` inside `at` that prints each datagram's
/// source and text, for `seconds`.
fn listen(at: &Namespace, port: u16, seconds: u32) -> Child {
    at.spawn_python(&format!(
        "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.bind(('0.0.0.0',{port}))\ns.settimeout({seconds})\n\
         try:\n while True:\n  d,a=s.recvfrom(2048)\n  print(a[0],d.decode(errors='replace'),flush=True)\n\
         except OSError:\n pass"
    ))
}

/// Every frame `at`'s eth0 receives for `seconds` that carries a
/// `MARK-…` word: the word, a line each.
fn sniff(at: &Namespace, seconds: u32) -> Child {
    at.spawn_python(&format!(
        "import socket,time\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW,socket.htons(3))\n\
         s.bind(('eth0',0))\ns.settimeout(0.2)\nend=time.time()+{seconds}\n\
         while time.time()<end:\n try:\n  d=s.recv(4096)\n except OSError:\n  continue\n \
         i=d.find(b'MARK-')\n if i>=0:\n  print(d[i:].split(b' ')[0].decode(errors='replace'),flush=True)"
    ))
}

fn heard(listener: Child) -> String {
    let out = listener.wait_with_output().expect("listener");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Python that sends one IPv4 UDP datagram with a source of its choosing
/// (a raw socket writes the whole header).
fn raw_udp(source: &str, target: &str, sport: u16, dport: u16, text: &str) -> String {
    format!(
        "import socket,struct\n\
         def csum(b):\n b=b+b'\\0'*(len(b)%2)\n s=sum(struct.unpack('!%dH'%(len(b)//2),b))\n s=(s>>16)+(s&0xffff)\n s+=s>>16\n return ~s&0xffff\n\
         src,dst=socket.inet_aton('{source}'),socket.inet_aton('{target}')\n\
         data=b'{text}'\n\
         udp=struct.pack('!HHHH',{sport},{dport},8+len(data),0)+data\n\
         ip=struct.pack('!BBHHHBBH4s4s',0x45,0,20+len(udp),1,0,64,17,0,src,dst)\n\
         ip=ip[:10]+struct.pack('!H',csum(ip))+ip[12:]\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_RAW,socket.IPPROTO_RAW)\n\
         s.sendto(ip+udp,('{target}',0))\n"
    )
}

/// Python that sends an Ethernet frame of `ethertype` with `payload_py`
/// (a Python bytes expression) out of eth0, from eth0's own MAC.
fn raw_frame(destination_mac: &str, ethertype: u16, payload_py: &str) -> String {
    format!(
        "import socket,struct\n\
         s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\ns.bind(('eth0',0))\n\
         me=s.getsockname()[4]\n\
         dst=bytes.fromhex('{}')\n\
         s.send(dst+me+struct.pack('!H',{ethertype})+({payload_py}))\n",
        destination_mac.replace(':', "")
    )
}

/// eth0's MAC inside `at` (the node's /sys shows the node's own eth0).
fn mac_of(at: &Namespace) -> String {
    let link = at.run("ip", &["-br", "link", "show", "dev", "eth0"]);
    link.split_whitespace().nth(2).expect("a MAC").to_owned()
}

#[test]
fn the_node_drops_spoofed_and_forged_traffic_of_its_workloads_and_strangers() {
    // Everything below runs in this thread's own namespace: its children
    // (ip, nft, unshare) start there.
    let handle = std::thread::spawn(|| {
        become_node();
        attacks();
    });
    if let Err(panic) = handle.join() {
        std::panic::resume_unwind(panic);
    }
}

fn attacks() {
    ip(&["link", "set", "lo", "up"]);
    let outsider = Namespace::new();
    ip(&[
        "link",
        "add",
        "name",
        "eth0",
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        &outsider.pid().to_string(),
    ]);
    ip(&["addr", "add", &format!("{NODE}/24"), "dev", "eth0"]);
    ip(&["link", "set", "eth0", "up"]);
    outsider.run(
        "ip",
        &["addr", "add", &format!("{OUTSIDER}/24"), "dev", "eth0"],
    );
    outsider.run("ip", &["link", "set", "eth0", "up"]);
    outsider.run("ip", &["link", "set", "lo", "up"]);

    let mut fabric = Fabric::new(node_config(true)).expect("the fabric");
    let peers = |set: &[&str]| -> HashMap<u32, BTreeSet<Ipv4Addr>> {
        HashMap::from([(VNI, set.iter().map(|p| p.parse().expect("peer")).collect())])
    };
    fabric.sync(&peers(&["198.18.0.12"]));
    let attacker = Namespace::new();
    let victim = Namespace::new();
    let mut attached = Vec::new();
    for (at, address) in [(&attacker, ATTACKER), (&victim, VICTIM)] {
        let network = AssignedNetwork {
            vni: VNI,
            address: format!("{address}/24").parse().expect("address"),
            peers: vec!["198.18.0.12".parse().expect("peer")],
            hosts: Vec::new(),
        };
        let id = Uuid::now_v7();
        fabric.attach(id, at.pid(), &network).expect("attach");
        attached.push((id, network));
    }

    // IP: the honest datagram arrives, one with another's source does not.
    let listener = listen(&victim, 5000, 3);
    std::thread::sleep(Duration::from_millis(300));
    attacker.run(
        "python3",
        &["-c", &raw_udp(ATTACKER, VICTIM, 4000, 5000, "honest")],
    );
    attacker.run(
        "python3",
        &["-c", &raw_udp(UNUSED, VICTIM, 4000, 5000, "spoofed")],
    );
    let got = heard(listener);
    assert!(got.contains(&format!("{ATTACKER} honest")), "{got}");
    assert!(!got.contains("spoofed"), "a spoofed source passed: {got}");

    // DHCP: an answer from port 67 is dropped; the same from another port
    // arrives.
    let listener = listen(&victim, 68, 3);
    std::thread::sleep(Duration::from_millis(300));
    attacker.run(
        "python3",
        &["-c", &raw_udp(ATTACKER, VICTIM, 67, 68, "dhcp-offer")],
    );
    attacker.run(
        "python3",
        &["-c", &raw_udp(ATTACKER, VICTIM, 6700, 68, "not-dhcp")],
    );
    let got = heard(listener);
    assert!(got.contains("not-dhcp"), "{got}");
    assert!(!got.contains("dhcp-offer"), "a DHCP answer passed: {got}");

    // ARP: an answer claiming an address the attacker does not hold never
    // reaches the victim's table; one for its own address does (the
    // victim takes unasked answers, as many hosts do).
    victim.run(
        "sh",
        &["-c", "echo 1 > /proc/sys/net/ipv4/conf/eth0/arp_accept"],
    );
    let victim_mac = mac_of(&victim);
    let arp = |claimed: &str| {
        format!(
            "struct.pack('!HHBBH',1,0x0800,6,4,2)+me+socket.inet_aton('{claimed}')+dst+socket.inet_aton('{claimed}')"
        )
    };
    attacker.run(
        "python3",
        &["-c", &raw_frame(&victim_mac, 0x0806, &arp(UNUSED))],
    );
    attacker.run(
        "python3",
        &["-c", &raw_frame(&victim_mac, 0x0806, &arp(ATTACKER))],
    );
    std::thread::sleep(Duration::from_millis(300));
    let table = victim.run("ip", &["-4", "neigh", "show", "dev", "eth0"]);
    assert!(
        table.contains(ATTACKER),
        "the honest answer was not taken: {table}"
    );
    assert!(
        !table.contains(UNUSED),
        "a spoofed ARP answer was taken: {table}"
    );

    // IPv6 (router advertisements among it) goes nowhere; IPv4 beside it
    // does.
    let sniffer = sniff(&victim, 3);
    std::thread::sleep(Duration::from_millis(300));
    let advertisement = "bytes.fromhex('6000000000103aff'+'fe80'+'00'*13+'01'+'ff02'+'00'*13+'01'+'8600')+b'MARK-ra '";
    attacker.run(
        "python3",
        &["-c", &raw_frame("33:33:00:00:00:01", 0x86dd, advertisement)],
    );
    attacker.run(
        "python3",
        &["-c", &raw_udp(ATTACKER, VICTIM, 4000, 5000, "MARK-ipv4 ")],
    );
    let got = heard(sniffer);
    assert!(got.contains("MARK-ipv4"), "{got}");
    assert!(
        !got.contains("MARK-ra"),
        "an IPv6 router advertisement passed: {got}"
    );

    // VXLAN: a stranger's packet carrying a frame for the victim is
    // dropped; the same packet from a peer's address arrives.
    let vxlan = |text: &str| {
        format!(
            "import socket,struct\n\
             def csum(b):\n s=sum(struct.unpack('!%dH'%(len(b)//2),b))\n s=(s>>16)+(s&0xffff)\n s+=s>>16\n return ~s&0xffff\n\
             src,dst=socket.inet_aton('{ATTACKER}'),socket.inet_aton('{VICTIM}')\n\
             data=b'{text}'\n\
             udp=struct.pack('!HHHH',4000,5000,8+len(data),0)+data\n\
             ip=struct.pack('!BBHHHBBH4s4s',0x45,0,20+len(udp),1,0,64,17,0,src,dst)\n\
             ip=ip[:10]+struct.pack('!H',csum(ip))+ip[12:]\n\
             frame=bytes.fromhex('{}')+bytes.fromhex('02aabbccddee')+struct.pack('!H',0x0800)+ip+udp\n\
             header=struct.pack('!II',0x08000000,{VNI}<<8)\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.sendto(header+frame,('{NODE}',4789))\n",
            victim_mac.replace(':', "")
        )
    };
    let listener = listen(&victim, 5000, 3);
    std::thread::sleep(Duration::from_millis(300));
    outsider.run("python3", &["-c", &vxlan("forged-vxlan")]);
    let got = heard(listener);
    assert!(
        !got.contains("forged-vxlan"),
        "a stranger's VXLAN packet passed: {got}"
    );
    fabric.sync(&peers(&["198.18.0.12", OUTSIDER]));
    let listener = listen(&victim, 5000, 3);
    std::thread::sleep(Duration::from_millis(300));
    outsider.run("python3", &["-c", &vxlan("peer-vxlan")]);
    let got = heard(listener);
    assert!(
        got.contains("peer-vxlan"),
        "a peer's packet did not arrive: {got}"
    );

    // Nothing from a workload's port reaches the node itself.
    let held = std::net::UdpSocket::bind(("0.0.0.0", 5001)).expect("a node socket");
    held.set_read_timeout(Some(Duration::from_secs(2))).ok();
    attacker.run(
        "ip",
        &["route", "add", &format!("{NODE}/32"), "dev", "eth0"],
    );
    attacker.run(
        "python3",
        &["-c", &raw_udp(ATTACKER, NODE, 4000, 5001, "to-the-node")],
    );
    let mut buffer = [0u8; 64];
    assert!(
        held.recv(&mut buffer).is_err(),
        "a workload reached the node: {:?}",
        String::from_utf8_lossy(&buffer)
    );

    // The agent restarts: its firewall is written anew, and the ports it
    // finds pass nothing until it takes them back from its ledger; then
    // honest traffic passes again and spoofed traffic still does not.
    drop(fabric);
    let mut fabric = Fabric::new(node_config(true)).expect("the fabric after a restart");
    fabric.sync(&peers(&["198.18.0.12"]));
    let send = |text: &str, source: &str| {
        attacker.run(
            "python3",
            &["-c", &raw_udp(source, VICTIM, 4000, 5000, text)],
        );
    };
    let listener = listen(&victim, 5000, 3);
    std::thread::sleep(Duration::from_millis(300));
    send("before-readopt", ATTACKER);
    let got = heard(listener);
    assert!(
        !got.contains("before-readopt"),
        "a port passed before it was taken back: {got}"
    );
    for (id, network) in &attached {
        fabric.readopt(*id, network);
    }
    let listener = listen(&victim, 5000, 3);
    std::thread::sleep(Duration::from_millis(300));
    send("after-readopt", ATTACKER);
    send("spoofed-after-readopt", UNUSED);
    let got = heard(listener);
    assert!(got.contains(&format!("{ATTACKER} after-readopt")), "{got}");
    assert!(
        !got.contains("spoofed-after-readopt"),
        "a spoofed source passed after a restart: {got}"
    );

    // The workloads' NAT reaches the internet but not the data centre's
    // network; once the operator keeps workloads off the internet it
    // reaches nothing, while the node's own programs still do.
    outsider.run(
        "ip",
        &["addr", "add", &format!("{INTERNET}/32"), "dev", "lo"],
    );
    ip(&["route", "add", &format!("{INTERNET}/32"), "via", OUTSIDER]);
    let mut web = outsider.spawn_python(
        "import socket\ns=socket.socket()\ns.bind(('0.0.0.0',8080))\ns.listen()\ns.settimeout(30)\n\
         try:\n while True:\n  s.accept()[0].close()\nexcept OSError:\n pass",
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        connects(Some(HELPER_GID), INTERNET),
        "the NAT has no internet"
    );
    assert!(
        !connects(Some(HELPER_GID), OUTSIDER),
        "the NAT reached the data centre's network"
    );
    drop(fabric);
    let _closed = Fabric::new(node_config(false)).expect("the fabric without egress");
    assert!(
        !connects(Some(HELPER_GID), INTERNET),
        "the NAT reached the internet with egress off"
    );
    assert!(connects(None, INTERNET), "the node lost the internet");
    web.kill().ok();
    web.wait().ok();
}

/// Whether a process of the node (in group `gid`, where given) opens a
/// TCP connection to `address` port 8080.
fn connects(gid: Option<u32>, address: &str) -> bool {
    let script = format!(
        "import socket\ntry:\n socket.create_connection(('{address}',8080),timeout=2).close()\n print('yes')\n\
         except OSError:\n print('no')"
    );
    let mut command = match gid {
        Some(gid) => {
            let mut c = Command::new("setpriv");
            c.args([&format!("--regid={gid}"), "--clear-groups", "python3"]);
            c
        }
        None => Command::new("python3"),
    };
    let out = command.args(["-c", &script]).output().expect("python3");
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}
