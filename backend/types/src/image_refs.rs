//! OCI image references, by the grammar of the distribution project
//! (`distribution/reference`): `registry[:port]/path[:tag][@digest]`.
//! Orders must name the registry: a bare `debian` means a catalog image,
//! never a guess at Docker Hub.

/// A reference taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    /// `host` or `host:port`.
    pub registry: String,
    /// The repository path below it.
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

/// The longest reference taken, as a name is at most 255 bytes.
pub const REFERENCE_MAX: usize = 512;

impl ImageRef {
    /// Parses `text`, or says what is wrong with it.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() || text.len() > REFERENCE_MAX {
            return Err(format!("must be 1 to {REFERENCE_MAX} bytes"));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) => {
                check_digest(digest)?;
                (rest, Some(digest.to_owned()))
            }
            None => (text, None),
        };
        // A tag follows the last colon after the last slash (a port's colon
        // comes before it).
        let last_slash = rest.rfind('/').unwrap_or(0);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(at) => {
                let at = last_slash + at;
                let tag = &rest[at + 1..];
                check_tag(tag)?;
                (&rest[..at], Some(tag.to_owned()))
            }
            None => (rest, None),
        };
        if name.len() > 255 {
            return Err("its name (registry and repository) must be at most 255 bytes".into());
        }
        let (registry, repository) = name.split_once('/').ok_or_else(|| {
            "must name its registry, such as registry.example/team/train:v3".to_owned()
        })?;
        if !(registry.contains(['.', ':']) || registry == "localhost") {
            return Err(format!(
                "must name its registry first ({registry:?} is not a host: write \
                 docker.io/library/{name} for Docker Hub's)"
            ));
        }
        check_registry(registry)?;
        for component in repository.split('/') {
            check_path_component(component)?;
        }
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag,
            digest,
        })
    }

    /// The whole reference, `:latest` where it names neither tag nor
    /// digest, as nodes pull it.
    pub fn whole(&self) -> String {
        let mut text = format!("{}/{}", self.registry, self.repository);
        match (&self.tag, &self.digest) {
            (None, None) => text.push_str(":latest"),
            (tag, digest) => {
                if let Some(tag) = tag {
                    text.push(':');
                    text.push_str(tag);
                }
                if let Some(digest) = digest {
                    text.push('@');
                    text.push_str(digest);
                }
            }
        }
        text
    }

    /// Whether an allowed prefix admits it: the prefix ends at a
    /// boundary of the reference (`/`, `:` or `@`), so `registry.example/team`
    /// admits `registry.example/team/train` but not `registry.example/teamx`.
    pub fn allowed_by(&self, prefix: &str) -> bool {
        let whole = self.whole();
        let Some(rest) = whole.strip_prefix(prefix) else {
            return false;
        };
        prefix.ends_with('/') || rest.is_empty() || rest.starts_with(['/', ':', '@'])
    }
}

/// The registry a reference pulls from, as credentials name it (hosts are
/// not case-sensitive): its first part when that is a host, Docker Hub's
/// otherwise (catalog references may be short).
pub fn registry_of(reference: &str) -> String {
    match reference.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => {
            first.to_lowercase()
        }
        _ => "docker.io".to_owned(),
    }
}

/// A registry as credentials and allowed prefixes name it: `host` or
/// `host:port`.
pub fn check_registry(registry: &str) -> Result<(), String> {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    if let Some(port) = port
        && port.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(format!("{registry:?} has no valid port"));
    }
    let valid = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if valid {
        Ok(())
    } else {
        Err(format!("{registry:?} is not a registry host"))
    }
}

/// Lowercase letters and digits, joined by `.`, `_`, `__` or dashes.
fn check_path_component(component: &str) -> Result<(), String> {
    let bad = || {
        format!(
            "{component:?} is not a repository name: lowercase letters and digits, \
             joined by '.', '_', '__' or '-'"
        )
    };
    if component.is_empty() {
        return Err("its repository path has an empty part".into());
    }
    let mut separator = String::new();
    let mut previous_alnum = false;
    for c in component.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if !separator.is_empty() {
                let ok = separator == "."
                    || separator == "_"
                    || separator == "__"
                    || separator.chars().all(|s| s == '-');
                if !ok || !previous_alnum {
                    return Err(bad());
                }
                separator.clear();
            }
            previous_alnum = true;
        } else if matches!(c, '.' | '_' | '-') {
            if !previous_alnum && separator.is_empty() {
                return Err(bad());
            }
            separator.push(c);
        } else {
            return Err(bad());
        }
    }
    if separator.is_empty() {
        Ok(())
    } else {
        Err(bad())
    }
}

fn check_tag(tag: &str) -> Result<(), String> {
    let mut chars = tag.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    if first_ok
        && tag.len() <= 128
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        Ok(())
    } else {
        Err(format!(
            "{tag:?} is not a tag: up to 128 letters, digits, '_', '.' and '-', not starting \
             with '.' or '-'"
        ))
    }
}

fn check_digest(digest: &str) -> Result<(), String> {
    let bad = || format!("{digest:?} is not a digest such as sha256:<64 hex digits>");
    let (algorithm, hex) = digest.split_once(':').ok_or_else(bad)?;
    let valid = match algorithm {
        "sha256" => hex.len() == 64,
        "sha512" => hex.len() == 128,
        _ => false,
    } && hex
        .chars()
        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    if valid { Ok(()) } else { Err(bad()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_of_every_shape_are_taken_apart() {
        let r = ImageRef::parse("nvcr.io/nvidia/pytorch:24.05-py3").expect("valid");
        assert_eq!(r.registry, "nvcr.io");
        assert_eq!(r.repository, "nvidia/pytorch");
        assert_eq!(r.tag.as_deref(), Some("24.05-py3"));
        let r = ImageRef::parse("127.0.0.1:5000/team/train").expect("valid");
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.whole(), "127.0.0.1:5000/team/train:latest");
        let digest = format!("sha256:{}", "a".repeat(64));
        let r = ImageRef::parse(&format!("localhost/x__y/a-b.c@{digest}")).expect("valid");
        assert_eq!(r.digest.as_deref(), Some(digest.as_str()));
        assert_eq!(r.whole(), format!("localhost/x__y/a-b.c@{digest}"));
    }

    #[test]
    fn malformed_references_say_what_is_wrong() {
        for (text, says) in [
            ("debian", "must name its registry"),
            ("library/debian:12", "is not a host"),
            ("registry.example/Team/train", "not a repository name"),
            ("registry.example/team//train", "empty part"),
            ("registry.example/team/train:-bad", "is not a tag"),
            ("registry.example/team/train@sha256:abc", "is not a digest"),
            ("registry.example:99999/train", "no valid port"),
            ("bad_host.example/train", "not a registry host"),
            ("registry.example/tr..ain", "not a repository name"),
            ("", "must be 1 to"),
        ] {
            let error = ImageRef::parse(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn a_prefix_admits_only_what_is_below_it() {
        let r = ImageRef::parse("registry.example/team/train:v3").expect("valid");
        assert!(r.allowed_by("registry.example/team"));
        assert!(r.allowed_by("registry.example/team/"));
        assert!(r.allowed_by("registry.example"));
        assert!(r.allowed_by("registry.example/team/train"));
        assert!(!r.allowed_by("registry.example/te"));
        assert!(!r.allowed_by("registry.ex"));
        assert!(!r.allowed_by("other.example"));
    }
}
