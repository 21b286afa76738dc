//! Line input for `cachet stat` and `cachet log`: stdin, a file read to its end, or a file
//! followed as it grows (like `tail -F`), delivered on a channel by a reader thread.
//!
//! Following: every complete line is delivered once; a last line without its newline waits
//! until the writer finishes it. When the file shrinks below what was read (truncated, e.g.
//! `> file` or `copytruncate`), reading restarts at its beginning; when the path names
//! another file (renamed away and recreated, as log rotation does), the rest of the old
//! file is read, then the new one from its beginning. A path that disappears is waited for.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::Duration;

/// Longest line kept, bytes; the rest of a longer line is dropped and the line reported.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Lines in flight between the reader thread and the consumer (back-pressure: memory stays
/// bounded however far ahead the reader is).
const CHANNEL_LINES: usize = 8192;

/// How often a followed file is checked for growth.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// What the reader thread sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// One line, without its end of line (invalid UTF-8 replaced by U+FFFD).
    Line(String),
    /// Something the user should know (truncation, rotation, an over-long line).
    Note(String),
    /// The input ended (stdin or a file read once).
    Eof,
    /// The input could not be read further; the message names it.
    Failed(String),
}

/// Where lines come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Standard input, until EOF.
    Stdin,
    /// A file read to its end.
    File(PathBuf),
    /// A file followed as it is written; never ends.
    Follow(PathBuf),
}

impl Input {
    /// The name used in messages (`-` for stdin).
    pub fn name(&self) -> String {
        match self {
            Self::Stdin => "-".to_owned(),
            Self::File(p) | Self::Follow(p) => p.display().to_string(),
        }
    }
}

/// Opens the input (so a missing file is reported before anything runs) and starts the
/// reader thread.
///
/// # Errors
/// The file cannot be opened.
pub fn spawn(input: &Input) -> io::Result<Receiver<Msg>> {
    let (tx, rx) = mpsc::sync_channel(CHANNEL_LINES);
    match input.clone() {
        Input::Stdin => {
            std::thread::spawn(move || read_all(io::stdin().lock(), "-", &tx));
        }
        Input::File(path) => {
            let f = File::open(&path)?;
            std::thread::spawn(move || {
                read_all(BufReader::new(f), &path.display().to_string(), &tx);
            });
        }
        Input::Follow(path) => {
            let mut follower = Follower::open(&path)?;
            std::thread::spawn(move || {
                loop {
                    let mut out = Vec::new();
                    let result = follower.poll(&mut out);
                    for m in out {
                        if tx.send(m).is_err() {
                            return;
                        }
                    }
                    if let Err(e) = result {
                        let _ = tx.send(Msg::Failed(format!("{}: {e}", path.display())));
                        return;
                    }
                    std::thread::sleep(FOLLOW_POLL);
                }
            });
        }
    }
    Ok(rx)
}

/// Reads one line of at most [`MAX_LINE_BYTES`] into `buf` (end of line removed); `Ok(None)`
/// at EOF, `Ok(Some(true))` when the line was cut.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<Option<bool>> {
    buf.clear();
    let n = r
        .by_ref()
        .take(MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(None);
    }
    let mut cut = false;
    if buf.last() != Some(&b'\n') && n > MAX_LINE_BYTES {
        r.skip_until(b'\n')?;
        cut = true;
    }
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(Some(cut))
}

fn read_all(mut r: impl BufRead, name: &str, tx: &SyncSender<Msg>) {
    let mut buf = Vec::with_capacity(1024);
    let mut line_no = 0u64;
    loop {
        let msg = match read_line(&mut r, &mut buf) {
            Ok(None) => Msg::Eof,
            Ok(Some(cut)) => {
                line_no += 1;
                if cut {
                    Msg::Note(format!(
                        "{name}:{line_no}: line over {MAX_LINE_BYTES} bytes, skipped"
                    ))
                } else {
                    Msg::Line(String::from_utf8_lossy(&buf).into_owned())
                }
            }
            Err(e) => Msg::Failed(format!("{name}: {e}")),
        };
        let end = matches!(msg, Msg::Eof | Msg::Failed(_));
        if tx.send(msg).is_err() || end {
            return;
        }
    }
}

/// A file followed as it grows.
pub struct Follower {
    path: PathBuf,
    file: Option<File>,
    /// Bytes of the current file consumed (complete lines and `partial`).
    pos: u64,
    /// The start of a line whose end has not been written yet.
    partial: Vec<u8>,
}

/// The identity of a file (device and inode), to notice rotation.
#[cfg(unix)]
fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt as _;
    (m.dev(), m.ino())
}

#[cfg(not(unix))]
fn identity(_: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

impl Follower {
    /// Opens `path` and starts at its beginning.
    ///
    /// # Errors
    /// The file cannot be opened.
    pub fn open(path: &Path) -> io::Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            file: Some(File::open(path)?),
            pos: 0,
            partial: Vec::new(),
        })
    }

    /// Appends to `out` every line completed since the last call, and notes for truncation
    /// and rotation. Never blocks waiting for data.
    ///
    /// # Errors
    /// Reading the open file failed.
    pub fn poll(&mut self, out: &mut Vec<Msg>) -> io::Result<()> {
        let Some(file) = self.file.as_mut() else {
            // The path had disappeared: wait for it to come back.
            if let Ok(f) = File::open(&self.path) {
                out.push(Msg::Note(format!("{}: reopened", self.path.display())));
                self.file = Some(f);
                self.pos = 0;
                self.partial.clear();
                self.drain(out)?;
            }
            return Ok(());
        };
        let len = file.metadata()?.len();
        if len < self.pos {
            out.push(Msg::Note(format!(
                "{}: truncated, reading from its beginning",
                self.path.display()
            )));
            self.pos = 0;
            self.partial.clear();
        }
        self.drain(out)?;
        // Rotation: the path now names another file (or none); the old one is drained.
        let same = match (std::fs::metadata(&self.path), self.file.as_ref()) {
            (Ok(now), Some(f)) => identity(&now) == identity(&f.metadata()?),
            _ => false,
        };
        if !same {
            out.push(Msg::Note(format!(
                "{}: rotated, reading the new file",
                self.path.display()
            )));
            self.file = File::open(&self.path).ok();
            self.pos = 0;
            self.partial.clear();
            if self.file.is_some() {
                self.drain(out)?;
            }
        }
        Ok(())
    }

    /// Reads from `pos` to the current end, emitting complete lines.
    fn drain(&mut self, out: &mut Vec<Msg>) -> io::Result<()> {
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        file.seek(SeekFrom::Start(self.pos))?;
        let mut chunk = Vec::new();
        let n = file.read_to_end(&mut chunk)?;
        self.pos += n as u64;
        let mut rest = &chunk[..];
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..i]);
            rest = &rest[i + 1..];
            let mut line = std::mem::take(&mut self.partial);
            if line.len() > MAX_LINE_BYTES {
                out.push(Msg::Note(format!(
                    "{}: line over {MAX_LINE_BYTES} bytes, skipped",
                    self.path.display()
                )));
                continue;
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            out.push(Msg::Line(String::from_utf8_lossy(&line).into_owned()));
        }
        if self.partial.len() <= MAX_LINE_BYTES {
            self.partial.extend_from_slice(rest);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn lines(f: &mut Follower) -> Vec<Msg> {
        let mut out = Vec::new();
        f.poll(&mut out).unwrap();
        out
    }

    fn line(s: &str) -> Msg {
        Msg::Line(s.to_owned())
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn follower_delivers_complete_lines_once_and_waits_for_partial_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.log");
        std::fs::write(&p, "one\ntw").unwrap();
        let mut f = Follower::open(&p).unwrap();
        assert_eq!(lines(&mut f), vec![line("one")]);
        assert_eq!(lines(&mut f), vec![]);
        append(&p, "o\r\nthree\n");
        assert_eq!(lines(&mut f), vec![line("two"), line("three")]);
    }

    #[test]
    fn follower_restarts_after_truncation_and_follows_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.log");
        std::fs::write(&p, "one\ntwo\n").unwrap();
        let mut f = Follower::open(&p).unwrap();
        assert_eq!(lines(&mut f).len(), 2);
        std::fs::write(&p, "x\n").unwrap(); // truncated and rewritten, shorter
        let got = lines(&mut f);
        assert!(
            matches!(&got[0], Msg::Note(n) if n.contains("truncated")),
            "{got:?}"
        );
        assert_eq!(got[1..], [line("x")]);
        // Rotation: the writer appends a last line to the old file, which is renamed away,
        // and a new file takes the path.
        append(&p, "last\n");
        std::fs::rename(&p, dir.path().join("a.log.1")).unwrap();
        std::fs::write(&p, "new\n").unwrap();
        let got = lines(&mut f);
        assert_eq!(got[0], line("last"));
        assert!(
            matches!(&got[1], Msg::Note(n) if n.contains("rotated")),
            "{got:?}"
        );
        assert_eq!(got[2..], [line("new")]);
        // The path disappears, then comes back.
        std::fs::remove_file(&p).unwrap();
        assert!(matches!(&lines(&mut f)[0], Msg::Note(n) if n.contains("rotated")));
        std::fs::write(&p, "again\n").unwrap();
        let got = lines(&mut f);
        assert!(
            matches!(&got[0], Msg::Note(n) if n.contains("reopened")),
            "{got:?}"
        );
        assert_eq!(got[1..], [line("again")]);
    }

    #[test]
    fn read_all_numbers_over_long_lines_and_ends_with_eof() {
        let (tx, rx) = mpsc::sync_channel(16);
        let long = "x".repeat(MAX_LINE_BYTES + 10);
        let text = format!("a\n{long}\nb");
        read_all(io::Cursor::new(text.into_bytes()), "in", &tx);
        let got: Vec<Msg> = rx.try_iter().collect();
        assert_eq!(got[0], line("a"));
        assert!(
            matches!(&got[1], Msg::Note(n) if n.starts_with("in:2: line over")),
            "{:?}",
            got[1]
        );
        assert_eq!(got[2..], [line("b"), Msg::Eof]);
    }
}
