//! What `deploy/` ships is checked by the tools that will read it.

use std::path::Path;
use std::process::Command;

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
