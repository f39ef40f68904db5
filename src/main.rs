//! The `litek8s` binary: parse flags, set up logging, run the subcommand, map errors to an
//! exit code.

use clap::Parser;
use litek8s::cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Apiserver(_args) => {
            eprintln!("litek8s: apiserver is not wired up yet");
            std::process::ExitCode::FAILURE
        }
    }
}
