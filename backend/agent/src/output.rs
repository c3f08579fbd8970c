//! Workloads' output: each one's stdout and stderr go to files in the state
//! directory, and every round the new complete lines are read from there to
//! be shipped to the control plane. The files outlive the agent, so a
//! workload's output is never lost to an agent restart (lines already
//! shipped before one are shipped again after it).

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use uuid::Uuid;

/// Lines read from one workload in one round, at most.
const LINES_PER_ROUND: usize = 1000;
/// Longer lines are cut into pieces of this many bytes.
const LINE_MAX: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub stream: &'static str,
    pub line: String,
}

struct Tail {
    path: PathBuf,
    stream: &'static str,
    offset: u64,
    partial: Vec<u8>,
}

pub struct Output {
    dir: PathBuf,
    tails: HashMap<Uuid, [Tail; 2]>,
}

impl Output {
    pub fn new(state_dir: &Path) -> std::io::Result<Self> {
        let dir = state_dir.join("output");
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            tails: HashMap::new(),
        })
    }

    /// The files a workload being started writes to: its stdout and
    /// stderr, fresh unless lines were noted for it already (its image's
    /// pull), which they follow.
    pub fn create(&mut self, id: Uuid) -> std::io::Result<(File, File)> {
        let (out, err) = (self.path(id, "stdout"), self.path(id, "stderr"));
        if self.tails.contains_key(&id) {
            let append = |path: &Path| File::options().append(true).create(true).open(path);
            return Ok((append(&out)?, append(&err)?));
        }
        let files = (File::create(&out)?, File::create(&err)?);
        self.tails
            .insert(id, [tail(out, "stdout"), tail(err, "stderr")]);
        Ok(files)
    }

    /// Adds a line of the agent's own to a workload's stderr, before it
    /// starts (how the pull of its image goes).
    pub fn note(&mut self, id: Uuid, line: &str) -> std::io::Result<()> {
        if !self.tails.contains_key(&id) {
            self.create(id)?;
        }
        let mut file = File::options().append(true).open(self.path(id, "stderr"))?;
        std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes())
    }

    /// The last `count` lines a workload printed on its standard output
    /// (a VM's serial console), read from the end of its file.
    pub fn last_lines(&self, id: Uuid, count: usize) -> Vec<String> {
        const WINDOW: u64 = 64 * 1024;
        let Ok(mut file) = File::open(self.path(id, "stdout")) else {
            return Vec::new();
        };
        let length = file.metadata().map_or(0, |m| m.len());
        if file
            .seek(SeekFrom::Start(length.saturating_sub(WINDOW)))
            .is_err()
        {
            return Vec::new();
        }
        let mut bytes = Vec::new();
        if file.read_to_end(&mut bytes).is_err() {
            return Vec::new();
        }
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<String> = text
            .lines()
            .map(|l| plain(l).trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        lines[lines.len().saturating_sub(count)..].to_vec()
    }

    /// Forgets a workload that never started, and its files.
    pub fn forget(&mut self, id: Uuid) {
        self.tails.remove(&id);
        for stream in ["stdout", "stderr"] {
            std::fs::remove_file(self.path(id, stream)).ok();
        }
    }

    /// Follows the files of a workload taken back after a restart.
    pub fn resume(&mut self, id: Uuid) {
        let tails = [
            tail(self.path(id, "stdout"), "stdout"),
            tail(self.path(id, "stderr"), "stderr"),
        ];
        self.tails.insert(id, tails);
    }

    /// New lines of every workload; `ended` workloads are read to the end
    /// (a last line without newline included) and then forgotten.
    pub fn read(&mut self, ended: &[Uuid]) -> Vec<(Uuid, Vec<Line>)> {
        let mut all = Vec::new();
        for (id, tails) in &mut self.tails {
            let last = ended.contains(id);
            let mut lines = Vec::new();
            for tail in tails.iter_mut() {
                tail.read_into(&mut lines, last);
            }
            if !lines.is_empty() {
                all.push((*id, lines));
            }
        }
        for id in ended {
            if let Some(tails) = self.tails.get(id)
                && tails.iter().all(|t| t.partial.is_empty())
            {
                self.tails.remove(id);
                for stream in ["stdout", "stderr"] {
                    std::fs::remove_file(self.path(*id, stream)).ok();
                }
            }
        }
        all
    }

    fn path(&self, id: Uuid, stream: &str) -> PathBuf {
        self.dir.join(format!("{id}.{stream}"))
    }
}

/// A console line without its terminal escape sequences (colours, screen
/// clearing) and other control characters.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI sequences run to a final byte in @..~; others are one
            // character long.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
        } else if !c.is_control() {
            out.push(c);
        }
    }
    out
}

fn tail(path: PathBuf, stream: &'static str) -> Tail {
    Tail {
        path,
        stream,
        offset: 0,
        partial: Vec::new(),
    }
}

impl Tail {
    fn read_into(&mut self, lines: &mut Vec<Line>, last: bool) {
        let Ok(mut file) = File::open(&self.path) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut fresh = Vec::new();
        let budget = (LINES_PER_ROUND * LINE_MAX) as u64;
        if let Ok(read) = file.take(budget).read_to_end(&mut fresh) {
            self.offset += read as u64;
        }
        self.partial.extend_from_slice(&fresh);
        let mut start = 0;
        for (i, byte) in self.partial.iter().enumerate() {
            if *byte == b'\n' {
                push(lines, self.stream, &self.partial[start..i]);
                start = i + 1;
            }
        }
        self.partial.drain(..start);
        if (last && !self.partial.is_empty()) || self.partial.len() >= LINE_MAX {
            push(lines, self.stream, &self.partial);
            self.partial.clear();
        }
    }
}

fn push(lines: &mut Vec<Line>, stream: &'static str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let text = text.strip_suffix('\r').unwrap_or(&text);
    if text.is_empty() {
        lines.push(Line {
            stream,
            line: String::new(),
        });
        return;
    }
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(LINE_MAX);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        lines.push(Line {
            stream,
            line: rest[..cut].to_owned(),
        });
        rest = &rest[cut..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consoles_last_lines_come_without_escape_sequences() {
        assert_eq!(
            plain("\u{1b}c\u{1b}[?7l\u{1b}[2J\u{1b}[0mSeaBIOS (version 1.16)\r"),
            "SeaBIOS (version 1.16)"
        );
        assert_eq!(plain("No bootable device."), "No bootable device.");
    }

    fn dir() -> PathBuf {
        std::env::temp_dir().join(format!("gantry-output-{}", Uuid::now_v7().simple()))
    }

    #[test]
    fn complete_lines_come_as_written_and_the_last_one_at_the_end() {
        use std::io::Write;
        let mut output = Output::new(&dir()).expect("dir");
        let id = Uuid::now_v7();
        let (mut out, mut err) = output.create(id).expect("files");
        write!(out, "one\ntwo\nthr").expect("write");
        writeln!(err, "oops").expect("write");
        let first = output.read(&[]);
        let lines: Vec<String> = first[0]
            .1
            .iter()
            .map(|l| format!("{}:{}", l.stream, l.line))
            .collect();
        assert_eq!(lines, ["stdout:one", "stdout:two", "stderr:oops"]);
        write!(out, "ee").expect("write");
        assert!(
            output.read(&[]).is_empty(),
            "a partial line waits for its end"
        );
        let last = output.read(&[id]);
        assert_eq!(
            last[0].1,
            vec![Line {
                stream: "stdout",
                line: "three".into()
            }]
        );
        assert!(
            output.read(&[id]).is_empty(),
            "an ended workload is forgotten"
        );
    }
}
