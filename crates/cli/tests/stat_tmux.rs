//! `cachet stat`'s live view in a real terminal: run in a detached tmux session (120×40)
//! following an access-log file that the test appends to, truncates; the screen is read
//! with `tmux capture-pane` and polled with a deadline until it shows the new numbers.
//!
//! tmux is required (scripts/test installs it, pinned, through scripts/lib.sh
//! `ensure_tmux`); without it the test fails and says so.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use regex::Regex;

/// How long the screen may take to show what the file says.
const DEADLINE: Duration = Duration::from_secs(20);

/// A tmux server on a private socket, killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap_or_else(|e| {
                panic!("tmux could not run ({e}): install it (scripts/lib.sh ensure_tmux; apt-get install tmux)")
            })
    }

    /// The visible screen, with the scrollback too when `history`.
    fn screen(&self, history: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-t", "stat"];
        if history {
            args.extend(["-S", "-"]);
        }
        String::from_utf8_lossy(&self.run(&args).stdout).into_owned()
    }

    /// Polls the screen until `re` matches it, or fails with the last screen.
    fn wait_for(&self, re: &str) -> String {
        self.wait_for_in(re, false)
    }

    fn wait_for_in(&self, re: &str, history: bool) -> String {
        let re = Regex::new(re).expect("regex");
        let end = Instant::now() + DEADLINE;
        loop {
            let s = self.screen(history);
            // A capture can catch the view half drawn (the rows below the match still
            // blank): the match counts once a second capture shows the same screen.
            if re.is_match(&s) && self.screen(history) == s {
                return s;
            }
            assert!(Instant::now() < end, "the screen never matched {re}:\n{s}");
            // Poll interval of the screen (not a wait for an outcome: the loop ends as
            // soon as the view shows it).
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

fn append(path: &Path, lines: &[&str]) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("log");
    for l in lines {
        writeln!(f, "{l}").expect("append");
    }
}

const HIT: &str = r#"cachet_log :: {"method":"GET","host":"blog.example","url":"/blog/alice/entry/1","route":"blog","cache":"HIT","status":200,"device":"pc","key":"k","ws_watermark":2048,"tier":"single"}"#;
const MISS: &str = r#"{"method":"GET","host":"blog.example","url":"/blog/alice/entry/2","route":"blog","cache":"MISS","status":200,"device":"pc","key":"k2","origin_ms":30,"ws_watermark":4096,"tier":"single"}"#;
const PASS: &str = r#"cachet_log :: {"method":"POST","host":"blog.example","url":"/login","route":"-","cache":"PASS","status":200,"device":"pc","key":"","origin_ms":5,"tier":"single"}"#;

#[test]
fn the_live_view_follows_a_growing_log_file() {
    assert!(
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success()),
        "tmux is required for this test: scripts/lib.sh ensure_tmux installs it (apt-get install tmux)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("access.log");
    std::fs::write(&log, "").expect("log");
    append(
        &log,
        &[
            HIT,
            MISS,
            "INFO viceroy: Listening on http://127.0.0.1:7676",
        ],
    );
    let tmux = Tmux {
        socket: format!("cachet-stat-test-{}", std::process::id()),
    };
    let cmd = format!(
        "'{}' stat --file '{}' --interval 100ms",
        env!("CARGO_BIN_EXE_cachet"),
        log.display()
    );
    let started = tmux.run(&[
        "new-session",
        "-d",
        "-x",
        "120",
        "-y",
        "40",
        "-s",
        "stat",
        &cmd,
    ]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    // Keep the pane after `cachet stat` exits, to read what it prints last.
    tmux.run(&["set-option", "-t", "stat", "remain-on-exit", "on"]);

    let s = tmux.wait_for(r"requests\s+2\s");
    assert!(s.contains("cachet stat · log"), "{s}");
    assert!(Regex::new(r"bad_lines\s+1\s").unwrap().is_match(&s), "{s}");
    assert!(
        Regex::new(r"workspace_watermark\s+4\.0 KiB")
            .unwrap()
            .is_match(&s),
        "{s}"
    );
    assert!(s.contains("hit ratio 50.0%"), "{s}");

    append(&log, &[HIT, HIT, PASS]);
    let s = tmux.wait_for(r"requests\s+5\s");
    assert!(Regex::new(r"hits\s+3\s").unwrap().is_match(&s), "{s}");
    assert!(Regex::new(r"passes\s+1\s").unwrap().is_match(&s), "{s}");
    assert!(
        Regex::new(r"origin_fetches\s+2\s").unwrap().is_match(&s),
        "{s}"
    );
    assert!(s.contains("hit ratio 60.0%"), "{s}");

    // Truncated (copytruncate-style rotation): counting goes on from the new content.
    std::fs::write(&log, format!("{MISS}\n")).expect("truncate");
    let s = tmux.wait_for(r"requests\s+6\s");
    assert!(s.contains("truncated, reading from its beginning"), "{s}");

    tmux.run(&["send-keys", "-t", "stat", "q"]);
    // After the terminal is restored, the final reading is printed as text (its first
    // lines may have scrolled into the history).
    let s = tmux.wait_for_in(r"(?s)· final ·.*requests\s+6\s", true);
    assert!(s.contains("misses"), "{s}");
}
