//! Behaviour of `cachet device classify`: plain UAs, `--hints` lines and `--explain`.

mod common;

use common::cachet;

const IPHONE: &str = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
/// Chrome on Android with the frozen model (`K`): the UA alone says phone.
const FROZEN: &str = "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Mobile Safari/537.36";
const DESKTOP: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36";

fn lines(out: &[u8]) -> Vec<String> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn plain_lines_classify_by_user_agent() {
    let input = format!("{IPHONE}\n{DESKTOP}\n\n");
    let (code, out, err) = cachet(&["device", "classify"], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines(&out), ["smartphone", "pc", "pc"]);
}

#[test]
fn hints_column_decides_before_the_rules() {
    // UA<TAB>hint[<TAB>cookie]; an empty hint column is an absent header.
    let input = format!(
        "{FROZEN}\t?0\n{FROZEN}\t\n{DESKTOP}\t?1\n{DESKTOP}\t?1\tX-UA-Device-force=pc\n{FROZEN}\tgarbage\n{IPHONE}\n"
    );
    let (code, out, err) = cachet(&["device", "classify", "--hints"], input.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        lines(&out),
        [
            "pc",
            "smartphone",
            "smartphone",
            "pc",
            "smartphone",
            "smartphone"
        ]
    );
    // The seed profile ignores the hint (Hatena's rule exactly), unless configured.
    let (_, out, _) = cachet(
        &["device", "classify", "--hints", "--profile", "seed"],
        input.as_bytes(),
    );
    assert_eq!(
        lines(&out),
        [
            "smartphone",
            "smartphone",
            "pc",
            "pc",
            "smartphone",
            "smartphone"
        ]
    );
}

#[test]
fn explain_names_the_deciding_input() {
    let input = format!(
        "{FROZEN}\t?0\n{DESKTOP}\t?0\tX-UA-Device-force=mobile-android\n{IPHONE}\t\n{DESKTOP}\n"
    );
    let (code, out, err) = cachet(
        &["device", "classify", "--hints", "--explain"],
        input.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
    let got = lines(&out);
    assert_eq!(got[0], "pc\thint Sec-CH-UA-Mobile");
    assert_eq!(got[1], "smartphone\tcookie X-UA-Device-force");
    assert!(
        got[2].starts_with("smartphone\trule ") && got[2].ends_with("-> smartphone"),
        "{}",
        got[2]
    );
    assert_eq!(got[3], "pc\tdefault");
}

#[test]
fn explain_without_hints_reads_whole_lines_as_uas() {
    // Without --hints a TAB is part of the UA, so the "hint" is never read.
    let input = format!("{DESKTOP}\t?1\n");
    let (_, out, _) = cachet(&["device", "classify", "--explain"], input.as_bytes());
    assert_eq!(lines(&out), ["pc\tdefault"]);
}

/// Ends a tmux server on every way out of a test.
struct Server<'a>(&'a dyn Fn(&[&str]) -> std::process::Output);

impl Drop for Server<'_> {
    fn drop(&mut self) {
        (self.0)(&["kill-server"]);
    }
}

/// Run on a terminal (a detached tmux session, as `stat_tmux.rs` does; tmux is required),
/// `device classify` says first that it reads standard input, then answers each line; a
/// pipe gets no such line (`plain_lines_classify_by_user_agent`: stderr stays empty).
#[test]
fn on_a_terminal_classify_says_it_reads_standard_input() {
    use std::process::Command;
    use std::time::{Duration, Instant};
    let socket = format!("cachet-device-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .arg("-L")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap_or_else(|e| {
                panic!("tmux could not run ({e}): install it (scripts/lib.sh ensure_tmux; apt-get install tmux)")
            })
    };
    let _server = Server(&tmux);
    let bin = env!("CARGO_BIN_EXE_cachet");
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        "dev",
        "-x",
        "200",
        "-y",
        "20",
        bin,
        "device",
        "classify",
    ]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let wait_for = |want: &str| {
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let screen = tmux(&["capture-pane", "-p", "-t", "dev"]);
            let screen = String::from_utf8_lossy(&screen.stdout).into_owned();
            if screen.contains(want) {
                return screen;
            }
            assert!(
                Instant::now() < end,
                "the screen never showed {want:?}:\n{screen}"
            );
            // Poll interval of the screen, not a wait for an outcome.
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for(
        "cachet: device classify: reading User-Agent values from standard input, one per line; end with Ctrl-D",
    );
    tmux(&["send-keys", "-t", "dev", IPHONE, "Enter"]);
    wait_for("smartphone");
}

#[test]
fn from_a_pipe_classify_prints_no_hint() {
    let (code, _, err) = cachet(&["device", "classify"], format!("{IPHONE}\n").as_bytes());
    assert_eq!((code, err.as_str()), (0, ""));
}
