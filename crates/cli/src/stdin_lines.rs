//! Line-by-line standard input for the streaming commands (`cachet device classify`,
//! `cachet query normalize`): bytes, bounded lines, answers flushed promptly.

use std::io::{BufRead, BufWriter, Read, Write};

use anyhow::{Context, Result};

/// Longest input line read, in bytes; longer lines are reported and skipped (or, for
/// `device classify`, classified on their first bytes as the edge would).
const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Reads stdin line by line as bytes (UAs need not be UTF-8), calling `f` per line. When
/// stdin is a terminal, one line on stderr first says that `command` reads `what` from it
/// and how to end (otherwise a bare `cachet device classify` just waits, silently).
pub fn each_line(
    command: &str,
    what: &str,
    mut f: impl FnMut(&[u8], &mut dyn Write) -> Result<()>,
) -> Result<()> {
    use std::io::IsTerminal as _;
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    if interactive {
        eprintln!(
            "cachet: {command}: reading {what} from standard input, one per line; end with Ctrl-D"
        );
    }
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut buf = Vec::with_capacity(512);
    loop {
        buf.clear();
        let n = (&mut input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .context("reading stdin")?;
        if n == 0 {
            break;
        }
        if buf.last() != Some(&b'\n') && n > MAX_LINE_BYTES {
            // Over-long line: consume the rest of it so the next line stays aligned.
            let mut rest = Vec::new();
            input
                .read_until(b'\n', &mut rest)
                .context("reading stdin")?;
        }
        while matches!(buf.last(), Some(b'\n' | b'\r')) {
            buf.pop();
        }
        f(&buf, &mut out)?;
        // Streaming: flush when no more input is buffered, so a pipe sees answers promptly;
        // on a terminal after every line (asking whether more is buffered would wait for
        // the next line to be typed).
        if interactive || input.fill_buf().map_or(true, <[u8]>::is_empty) {
            out.flush().context("writing stdout")?;
        }
    }
    out.flush().context("writing stdout")?;
    Ok(())
}
