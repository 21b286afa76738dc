//! Prints the JSON verdicts of a ban scenario file: `cargo run -p cachet-ban --example scenario -- FILE`.

use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: scenario FILE.json");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    match cachet_ban::evaluate_scenario(&text) {
        Ok(report) => {
            print!("{}", report.to_json_pretty());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{path}: {e}");
            ExitCode::FAILURE
        }
    }
}
