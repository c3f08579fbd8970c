//! What Slurm's commands print, read into values. Only the plain-text
//! formats Gantry asks for explicitly are read: they read the same from
//! Slurm 22.05 to 26.x, where `--json` output changes with every release.

use chrono::{DateTime, Utc};

/// `sinfo` with this format lists one node per line.
pub const SINFO_FORMAT: &str = "%N|%G|%c|%m|%T|%E";

/// `sacct` with these fields, `--parsable2` and `SLURM_TIME_FORMAT=%s`.
pub const SACCT_FORMAT: &str = "JobID,JobName,State,ExitCode,Start,End";

/// A node as `sinfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmNode {
    pub name: String,
    /// Its GPUs: each GRES type with its count.
    pub gpus: Vec<(String, u32)>,
    pub cpus: u32,
    pub memory_mib: i64,
    pub health: Health,
    /// Slurm's reason for a drain or a fault; none when it has none.
    pub reason: Option<String>,
}

/// What a node's Slurm state means for Gantry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Takes work (idle, mixed, allocated, completing).
    Up,
    /// Drained or draining: keeps its work, takes no new.
    Drained,
    /// Down, failed, or not answering its controller.
    Down,
}

/// Reads `sinfo -h -N -o SINFO_FORMAT`. Lines that do not read are left
/// out; a node listed twice (in two partitions) is kept once.
pub fn nodes(out: &str) -> Vec<SlurmNode> {
    let mut nodes: Vec<SlurmNode> = Vec::new();
    for line in out.lines() {
        let mut parts = line.splitn(6, '|');
        let (Some(name), Some(gres), Some(cpus), Some(memory), Some(state), reason) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            continue;
        };
        let (Ok(cpus), Ok(memory_mib)) = (cpus.trim().parse(), memory.trim().parse()) else {
            continue;
        };
        if name.is_empty() || nodes.iter().any(|n| n.name == name) {
            continue;
        }
        let reason = reason
            .map(str::trim)
            .filter(|r| !r.is_empty() && *r != "none" && *r != "(null)");
        nodes.push(SlurmNode {
            name: name.to_owned(),
            gpus: gpus(gres),
            cpus,
            memory_mib,
            health: health(state),
            reason: reason.map(str::to_owned),
        });
    }
    nodes
}

/// Reads a node state such as `idle`, `mixed`, `drained`, `down*` or
/// `allocated+drain`: a trailing `*` means it does not answer.
fn health(state: &str) -> Health {
    let state = state.trim().to_ascii_lowercase();
    if state.ends_with('*') {
        return Health::Down;
    }
    let words: Vec<&str> = state
        .trim_end_matches(|c: char| "~#!%$@^-".contains(c))
        .split('+')
        .collect();
    let any = |names: &[&str]| words.iter().any(|w| names.contains(w));
    if any(&[
        "down",
        "fail",
        "failing",
        "inval",
        "unknown",
        "future",
        "not_responding",
        "powered_down",
        "power_down",
        "powering_down",
        "no_respond",
    ]) {
        Health::Down
    } else if any(&["drain", "drained", "draining"]) {
        Health::Drained
    } else {
        Health::Up
    }
}

/// The GPUs of a GRES string such as `gpu:h100:8(S:0-1),shard:4`: typed
/// GPUs with their counts (an untyped `gpu:8` has type "").
pub fn gpus(gres: &str) -> Vec<(String, u32)> {
    let mut found = Vec::new();
    for item in split_outside(gres, '(', ')') {
        let item = item.split('(').next().unwrap_or_default();
        let parts: Vec<&str> = item.split(':').collect();
        let (kind, count) = match parts.as_slice() {
            ["gpu", count] => ("", *count),
            ["gpu", kind, count] => (*kind, *count),
            _ => continue,
        };
        if let Ok(count) = count.parse::<u32>() {
            found.push((kind.to_owned(), count));
        }
    }
    found
}

/// Splits a Slurm list at the commas outside `open`…`close` pairs, such
/// as `gpu:h100:8(S:0,1),shard:4` or `gpu[001-003,007],login1`; empty
/// items are left out.
fn split_outside(text: &str, open: char, close: char) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        if c == open {
            depth += 1;
        } else if c == close {
            depth = depth.saturating_sub(1);
        } else if c == ',' && depth == 0 {
            items.push(&text[start..i]);
            start = i + 1;
        }
    }
    items.push(&text[start..]);
    items.into_iter().filter(|s| !s.is_empty()).collect()
}

/// A job as `scontrol -d -o show job` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShownJob {
    pub id: i64,
    pub name: String,
    pub state: String,
    pub partition: String,
    /// Why it waits, while it waits.
    pub reason: Option<String>,
    /// Each node it holds with the GPU indices Slurm bound there.
    pub gpus: Vec<(String, Vec<u32>)>,
    /// Whether it was ever given nodes: a job cancelled while it waited
    /// shows a start time, but never started.
    pub allocated: bool,
    pub start: Option<DateTime<Utc>>,
    /// When it ended, once its state is final (before, the end its time
    /// limit would bring).
    pub end: Option<DateTime<Utc>>,
    /// `ExitCode`: the code, and the signal that ended it (0 for none).
    pub exit: (i32, i32),
}

impl ShownJob {
    /// What accounting will record of a job that started, as the
    /// controller already says it: the same state, exit and times that
    /// slurmctld hands slurmdbd, without waiting for them to land there.
    /// None for a job that never started.
    pub fn accounted(&self) -> Option<Accounted> {
        if !self.allocated {
            return None;
        }
        let end = if is_final(&self.state) {
            Some(self.end?)
        } else {
            None
        };
        Some(Accounted {
            id: self.id,
            name: self.name.clone(),
            state: self.state.clone(),
            exit_code: self.exit.0,
            signal: self.exit.1,
            start: Some(self.start?),
            end,
        })
    }
}

/// Reads `scontrol -d -o show job`: one job per line of `Key=Value`
/// pairs, where a value may hold spaces (a job's name may).
pub fn shown_jobs(out: &str) -> Vec<ShownJob> {
    out.lines().filter_map(shown_job).collect()
}

fn shown_job(line: &str) -> Option<ShownJob> {
    let pairs = pairs(line);
    let mut job = ShownJob::default();
    let mut nodes: Option<Vec<String>> = None;
    for (key, value) in pairs {
        match key {
            "JobId" => job.id = value.parse().ok()?,
            "JobName" => job.name = value.to_owned(),
            "JobState" => job.state = value.to_owned(),
            "Partition" => job.partition = value.to_owned(),
            "Reason" if value != "None" => job.reason = Some(value.to_owned()),
            "NodeList" => job.allocated = !value.is_empty() && value != "(null)",
            "StartTime" => job.start = epoch(value),
            "EndTime" => job.end = epoch(value),
            "ExitCode" => job.exit = exit_code(value).unwrap_or_default(),
            // The detail lines pair each group of nodes with its GRES.
            "Nodes" => nodes = Some(hostlist(value)),
            "GRES" => {
                if let Some(group) = nodes.take() {
                    let indices = gres_indices(value);
                    job.gpus
                        .extend(group.into_iter().map(|n| (n, indices.clone())));
                }
            }
            _ => {}
        }
    }
    (job.id > 0).then_some(job)
}

/// Splits `A=1 B=two words C=3` into its pairs: a word without `=` (or
/// with a key Slurm does not write) belongs to the value before it.
fn pairs(line: &str) -> Vec<(&str, &str)> {
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    let mut starts: Vec<(usize, usize)> = Vec::new();
    let mut offset = 0;
    for word in line.split(' ') {
        let is_key = word.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '/')
                && k.starts_with(|c: char| c.is_ascii_uppercase())
        });
        if is_key {
            starts.push((offset, offset + word.find('=').unwrap_or(0)));
        }
        offset += word.len() + 1;
    }
    for (i, (start, eq)) in starts.iter().enumerate() {
        let end = starts
            .get(i + 1)
            .map_or(line.len(), |(next, _)| next.saturating_sub(1));
        pairs.push((&line[*start..*eq], line[eq + 1..end.max(eq + 1)].trim_end()));
    }
    pairs
}

/// The GPU indices of a GRES string such as `gpu:h100:4(IDX:0-1,4,6)`.
pub fn gres_indices(gres: &str) -> Vec<u32> {
    let mut indices = Vec::new();
    for item in split_outside(gres, '(', ')') {
        if !item.starts_with("gpu") {
            continue;
        }
        let Some(list) = item
            .split_once("(IDX:")
            .and_then(|(_, rest)| rest.strip_suffix(')'))
        else {
            continue;
        };
        for range in list.split(',') {
            match range.split_once('-') {
                Some((a, b)) => {
                    if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                        indices.extend(a..=b.min(a.saturating_add(1024)));
                    }
                }
                None => indices.extend(range.parse::<u32>().ok()),
            }
        }
    }
    indices.sort_unstable();
    indices.dedup();
    indices
}

/// Expands a Slurm host list such as `gpu[001-003,007],login1` into its
/// names, keeping each range's zero padding.
pub fn hostlist(list: &str) -> Vec<String> {
    let mut names = Vec::new();
    for item in split_outside(list, '[', ']')
        .into_iter()
        .filter(|s| *s != "(null)")
    {
        let Some((prefix, rest)) = item.split_once('[') else {
            names.push(item.to_owned());
            continue;
        };
        let Some((ranges, suffix)) = rest.split_once(']') else {
            names.push(item.to_owned());
            continue;
        };
        for range in ranges.split(',') {
            let (low, high) = range.split_once('-').unwrap_or((range, range));
            let width = low.len();
            let (Ok(a), Ok(b)) = (low.parse::<u64>(), high.parse::<u64>()) else {
                continue;
            };
            for n in a..=b.min(a.saturating_add(100_000)) {
                names.push(format!("{prefix}{n:0width$}{suffix}"));
            }
        }
    }
    names
}

/// A job as Slurm's accounting keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accounted {
    pub id: i64,
    pub name: String,
    /// The state's first word: `COMPLETED`, `FAILED`, `CANCELLED`, …
    pub state: String,
    pub exit_code: i32,
    /// The signal that ended it, 0 for none.
    pub signal: i32,
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
}

impl Accounted {
    /// Whether it has ended for good (a requeued job has not).
    pub fn is_final(&self) -> bool {
        is_final(&self.state)
    }
}

/// Whether a Slurm job state is one it never leaves.
pub fn is_final(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "OUT_OF_MEMORY"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "PREEMPTED"
    )
}

/// Reads `sacct -X -n --parsable2 --format=SACCT_FORMAT` with epoch times.
pub fn accounted(out: &str) -> Vec<Accounted> {
    out.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('|').collect();
            let [id, name, state, exit, start, end] = fields.as_slice() else {
                return None;
            };
            let (exit_code, signal) = exit_code(exit)?;
            Some(Accounted {
                id: id.parse().ok()?,
                name: (*name).to_owned(),
                state: state.split_whitespace().next()?.to_owned(),
                exit_code,
                signal,
                start: epoch(start),
                end: epoch(end),
            })
        })
        .collect()
}

/// Reads Slurm's `code:signal`.
fn exit_code(text: &str) -> Option<(i32, i32)> {
    let (code, signal) = text.split_once(':').unwrap_or((text, "0"));
    Some((code.parse().ok()?, signal.parse().unwrap_or(0)))
}

fn epoch(text: &str) -> Option<DateTime<Utc>> {
    text.parse::<i64>()
        .ok()
        .filter(|s| *s > 0)
        .and_then(|s| DateTime::from_timestamp(s, 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinfo_lines_give_nodes_with_their_gpus_and_health() {
        let out = "gpu001|gpu:h100:8(S:0-1)|64|1000000|idle|none\n\
                   gpu002|gpu:h100:8|64|1000000|drained|maintenance: fan 3\n\
                   gpu003|gpu:h100:4,gpu:a100:4|32|500000|down*|Not responding\n\
                   gpu004|(null)|16|64000|mixed+drain|bad | pipe\n\
                   gpu001|gpu:h100:8|64|1000000|idle|none\n\
                   broken line\n";
        let nodes = nodes(out);
        assert_eq!(nodes.len(), 4);
        assert_eq!(nodes[0].gpus, vec![("h100".to_owned(), 8)]);
        assert_eq!(nodes[0].health, Health::Up);
        assert_eq!(nodes[0].reason, None);
        assert_eq!(nodes[1].health, Health::Drained);
        assert_eq!(nodes[1].reason.as_deref(), Some("maintenance: fan 3"));
        assert_eq!(
            nodes[2].gpus,
            vec![("h100".to_owned(), 4), ("a100".to_owned(), 4)]
        );
        assert_eq!(nodes[2].health, Health::Down);
        assert!(nodes[3].gpus.is_empty());
        assert_eq!(nodes[3].health, Health::Drained);
        assert_eq!(nodes[3].reason.as_deref(), Some("bad | pipe"));
    }

    #[test]
    fn states_read_as_health() {
        for (state, expected) in [
            ("idle", Health::Up),
            ("allocated", Health::Up),
            ("completing", Health::Up),
            ("idle~", Health::Up),
            ("draining", Health::Drained),
            ("drained", Health::Drained),
            ("down", Health::Down),
            ("idle*", Health::Down),
            ("inval", Health::Down),
            ("down+drain", Health::Down),
        ] {
            assert_eq!(health(state), expected, "{state}");
        }
    }

    #[test]
    fn host_lists_expand_with_their_padding() {
        assert_eq!(
            hostlist("gpu[001-003,010],login1"),
            vec!["gpu001", "gpu002", "gpu003", "gpu010", "login1"]
        );
        assert_eq!(hostlist("n[8-10]"), vec!["n8", "n9", "n10"]);
        assert!(hostlist("(null)").is_empty());
    }

    #[test]
    fn gres_indices_read_ranges_and_singles() {
        assert_eq!(gres_indices("gpu:h100:4(IDX:0-1,4,6)"), vec![0, 1, 4, 6]);
        assert_eq!(gres_indices("gpu:8(IDX:0-7)").len(), 8);
        assert!(gres_indices("gpu:h100:4").is_empty());
    }

    #[test]
    fn scontrol_lines_give_jobs_with_their_bound_gpus() {
        let out = "JobId=41 JobName=gantry-0192-1 UserId=root(0) GroupId=root(0) JobState=RUNNING Reason=None Dependency=(null) Partition=gpu NodeList=gpu[001-002] BatchHost=gpu001 Nodes=gpu001 CPU_IDs=0-63 Mem=0 GRES=gpu:h100:8(IDX:0-7) Nodes=gpu002 CPU_IDs=0 Mem=0 GRES=gpu:h100:2(IDX:3-4) Comment=gantry order\n\
                   JobId=42 JobName=my training run UserId=alice(1000) JobState=PENDING Reason=Resources Partition=gpu NodeList=(null)\n";
        let jobs = shown_jobs(out);
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].id, 41);
        assert_eq!(jobs[0].name, "gantry-0192-1");
        assert_eq!(jobs[0].state, "RUNNING");
        assert_eq!(jobs[0].reason, None);
        assert_eq!(
            jobs[0].gpus,
            vec![
                ("gpu001".to_owned(), (0..8).collect::<Vec<u32>>()),
                ("gpu002".to_owned(), vec![3, 4]),
            ]
        );
        assert_eq!(jobs[1].name, "my training run");
        assert_eq!(jobs[1].reason.as_deref(), Some("Resources"));
        assert!(jobs[1].gpus.is_empty());
    }

    #[test]
    fn the_controller_gives_what_accounting_will_record_of_a_job_that_started() {
        let out = "JobId=7 JobName=gantry-a-1 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 StartTime=1796623433 EndTime=1796623435 Partition=gpu NodeList=n001 BatchHost=n001\n\
                   JobId=8 JobName=gantry-b-1 JobState=RUNNING Reason=None ExitCode=0:0 StartTime=1796623433 EndTime=1796627033 Partition=gpu NodeList=n002\n\
                   JobId=9 JobName=gantry-c-1 JobState=CANCELLED Reason=None ExitCode=0:0 StartTime=1796623448 EndTime=1796623448 Partition=gpu NodeList=\n\
                   JobId=10 JobName=gantry-d-1 JobState=PENDING Reason=Resources ExitCode=0:0 StartTime=Unknown EndTime=Unknown Partition=gpu NodeList=(null)\n";
        let jobs = shown_jobs(out);
        let failed = jobs[0].accounted().unwrap();
        assert!(failed.is_final());
        assert_eq!((failed.exit_code, failed.signal), (3, 0));
        assert_eq!(
            (failed.end.unwrap() - failed.start.unwrap()).num_seconds(),
            2
        );
        // A running job's end time is only its limit.
        let running = jobs[1].accounted().unwrap();
        assert!(!running.is_final());
        assert!(running.start.is_some() && running.end.is_none());
        // Cancelled while it waited: accounting records no start.
        assert_eq!(jobs[2].accounted(), None);
        assert_eq!(jobs[3].accounted(), None);
    }

    #[test]
    fn sacct_lines_give_final_states_and_times() {
        let out = "7|gantry-a-1|COMPLETED|0:0|1796610480|1796610483\n\
                   8|gantry-b-1|CANCELLED by 0|0:15|1796610480|1796610490\n\
                   9|gantry-c-1|PENDING|0:0|Unknown|Unknown\n";
        let jobs = accounted(out);
        assert_eq!(jobs.len(), 3);
        assert!(jobs[0].is_final());
        assert_eq!(
            (jobs[0].end.unwrap() - jobs[0].start.unwrap()).num_seconds(),
            3
        );
        assert_eq!(jobs[1].state, "CANCELLED");
        assert_eq!(jobs[1].signal, 15);
        assert!(!jobs[2].is_final());
        assert_eq!(jobs[2].start, None);
    }
}
