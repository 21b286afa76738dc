//! Log inputs for `cachet simulate`: files or stdin, gzip detected by magic bytes, bounded lines.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use flate2::bufread::MultiGzDecoder;

/// Longest log line read, in bytes (64 KiB); a longer line is counted as bad and skipped.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Read buffer size, in bytes.
const BUFFER_BYTES: usize = 256 * 1024;

/// The gzip magic bytes (RFC 1952 §2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Counts the raw bytes read from a file (compressed bytes for gzip), for the progress bar.
struct Counting<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// One opened log: whether it is gzip, and a line reader.
pub struct Input {
    /// Whether the stream is gzip-compressed (detected by magic bytes).
    pub gzip: bool,
    reader: Box<dyn BufRead>,
}

/// What [`Input::next_line`] read.
pub enum Line {
    /// A line (without its `\n` / `\r\n`) is in the buffer.
    Ok,
    /// The line was longer than [`MAX_LINE_BYTES`]; it was skipped.
    TooLong,
}

impl Input {
    /// Opens `path` (`-` = stdin), counting raw bytes read into `count`. A gzip stream
    /// (also several concatenated members, as `logrotate` and `cat a.gz b.gz` make) is
    /// decompressed transparently.
    ///
    /// # Errors
    /// The file cannot be opened or its first bytes cannot be read.
    pub fn open(path: &Path, count: Rc<Cell<u64>>) -> io::Result<Self> {
        let raw: Box<dyn Read> = if path.as_os_str() == "-" {
            Box::new(io::stdin())
        } else {
            Box::new(File::open(path)?)
        };
        let mut counted = Counting { inner: raw, count };
        // Read the first two bytes ourselves (a pipe may deliver one byte at a time), then
        // put them back in front of the stream.
        let mut head = [0u8; 2];
        let mut got = 0;
        while got < head.len() {
            match counted.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let gzip = head[..got] == GZIP_MAGIC;
        let stream = BufReader::with_capacity(
            BUFFER_BYTES,
            io::Cursor::new(head).take(got as u64).chain(counted),
        );
        let reader: Box<dyn BufRead> = if gzip {
            Box::new(BufReader::with_capacity(
                BUFFER_BYTES,
                MultiGzDecoder::new(stream),
            ))
        } else {
            Box::new(stream)
        };
        Ok(Self { gzip, reader })
    }

    /// Reads the next line into `buf` (cleared first). `None` at the end of the input.
    ///
    /// # Errors
    /// Read errors, including a corrupt or truncated gzip stream.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Line>> {
        buf.clear();
        let n = (&mut self.reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', buf)?;
        if n == 0 {
            return Ok(None);
        }
        if buf.last() != Some(&b'\n') && n > MAX_LINE_BYTES {
            // Consume the rest of the over-long line so the next one stays aligned.
            skip_line(&mut self.reader)?;
            buf.clear();
            return Ok(Some(Line::TooLong));
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        Ok(Some(Line::Ok))
    }
}

/// Discards input up to and including the next `\n`.
fn skip_line<R: BufRead>(r: &mut R) -> io::Result<()> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            r.consume(i + 1);
            return Ok(());
        }
        let n = buf.len();
        r.consume(n);
    }
}

/// The size of `path` in bytes when it is a regular file (`None` for stdin and pipes).
pub fn file_size(path: &Path) -> Option<u64> {
    if path.as_os_str() == "-" {
        return None;
    }
    std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len())
}
