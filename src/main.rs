//! The `litek8s` binary: parse flags, set up logging, run the subcommand, and map every error
//! to one line on stderr and a non-zero exit code.

use std::process::ExitCode;

use litek8s::cli::ParseError;

fn main() -> ExitCode {
    litek8s::tune_allocator();
    let cli = match litek8s::cli::parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        // A configuration file's error names its file and line.
        Err(ParseError::Config(e)) => {
            eprintln!("litek8s: {e}");
            return ExitCode::from(2);
        }
        // --help and --version print their text and exit 0; usage errors print one line.
        Err(ParseError::Usage(e)) if !e.use_stderr() => {
            return e.print().map_or(ExitCode::FAILURE, |_| ExitCode::SUCCESS)
        }
        Err(ParseError::Usage(e)) => {
            // The first paragraph on one line: "required arguments were not provided:"
            // is followed by the arguments on the next lines.
            let text = e.to_string();
            let first: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            eprintln!(
                "litek8s: {} (see --help)",
                first.join(" ").trim_start_matches("error: ")
            );
            return ExitCode::from(2);
        }
    };
    let run = cli.init_logging().and_then(|()| {
        litek8s::failpoints::check();
        cli.run()
    });
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("litek8s: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, skipping a cause its parent's message already
/// quotes (many error types print their source inside their own message).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line.replace('\n', " ")
}
