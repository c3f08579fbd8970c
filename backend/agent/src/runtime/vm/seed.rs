//! cloud-init's NoCloud seed for one VM: its instance id, host name, the
//! tenant's SSH keys for root, and the SSH host key the agent made (so the
//! fingerprint the tenant is shown is the one the VM presents), on an
//! ISO 9660 volume labelled `cidata`, which cloud-init finds on any disk.

use std::path::Path;
use std::process::Command;

/// What the seed says.
pub struct Seed<'a> {
    pub instance_id: &'a str,
    pub hostname: &'a str,
    pub keys: &'a [String],
    pub host_key_private: &'a str,
    pub host_key_public: &'a str,
}

/// A YAML string literal: JSON's, which YAML reads as the same string.
fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

impl Seed<'_> {
    pub fn meta_data(&self) -> String {
        format!(
            "instance-id: {}\nlocal-hostname: {}\n",
            quoted(self.instance_id),
            quoted(self.hostname)
        )
    }

    pub fn user_data(&self) -> String {
        let keys: String = self
            .keys
            .iter()
            .map(|k| format!("  - {}\n", quoted(k.trim())))
            .collect();
        format!(
            "#cloud-config\n\
             hostname: {hostname}\n\
             users: []\n\
             disable_root: false\n\
             ssh_pwauth: false\n\
             ssh_deletekeys: true\n\
             ssh_genkeytypes: []\n\
             ssh_keys:\n  ed25519_private: {private}\n  ed25519_public: {public}\n\
             ssh_authorized_keys:\n{keys}",
            hostname = quoted(self.hostname),
            private = quoted(self.host_key_private),
            public = quoted(self.host_key_public.trim()),
        )
    }

    /// Writes the seed volume to `iso` with `genisoimage`.
    pub fn write(&self, genisoimage: &Path, iso: &Path) -> Result<(), String> {
        let dir = iso.with_extension("d");
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("meta-data"), self.meta_data()))
            .and_then(|()| std::fs::write(dir.join("user-data"), self.user_data()))
            .map_err(|e| format!("writing the VM's cloud-init seed: {e}"))?;
        let made = Command::new(genisoimage)
            .args(["-quiet", "-volid", "cidata", "-joliet", "-rock", "-output"])
            .arg(iso)
            .arg(dir.join("meta-data"))
            .arg(dir.join("user-data"))
            .output()
            .map_err(|e| format!("running genisoimage: {e}"))?;
        std::fs::remove_dir_all(&dir).ok();
        if made.status.success() {
            Ok(())
        } else {
            Err(format!(
                "genisoimage could not make the VM's cloud-init seed: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_gives_root_the_tenants_keys_and_the_agents_host_key() {
        let keys = vec![
            "ssh-ed25519 AAAAC3Nza laptop\n".to_owned(),
            "ssh-rsa AAAAB3 \"quoted\" comment".to_owned(),
        ];
        let seed = Seed {
            instance_id: "0190a1b2",
            hostname: "gpu-worker-3",
            keys: &keys,
            host_key_private: "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n",
            host_key_public: "ssh-ed25519 AAAAhost gantry-instance\n",
        };
        assert_eq!(
            seed.meta_data(),
            "instance-id: \"0190a1b2\"\nlocal-hostname: \"gpu-worker-3\"\n"
        );
        let user = seed.user_data();
        assert!(user.starts_with("#cloud-config\n"));
        assert!(user.contains("disable_root: false\n"));
        assert!(user.contains("ssh_pwauth: false\n"));
        assert!(user.contains("  - \"ssh-ed25519 AAAAC3Nza laptop\"\n"));
        assert!(user.contains("  - \"ssh-rsa AAAAB3 \\\"quoted\\\" comment\"\n"));
        assert!(user.contains(
            "  ed25519_private: \"-----BEGIN OPENSSH PRIVATE KEY-----\\nabc\\n-----END OPENSSH PRIVATE KEY-----\\n\"\n"
        ));
        assert!(user.contains("  ed25519_public: \"ssh-ed25519 AAAAhost gantry-instance\"\n"));
    }
}
