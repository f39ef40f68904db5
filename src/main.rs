//! The `litek8s` binary: every command of the suite (API server, load balancer, agent, and the
//! administration commands). Flags, logging and the one-line errors: `litek8s::cli::main`.
//!
//! Called by the name `litek8s-agent` (a link `install` makes where no agent executable came
//! with it), it is the agent executable: the same flags as `src/bin/litek8s-agent.rs`.

use std::path::Path;
use std::process::ExitCode;

// mimalloc: faster for the store's and the log's many small values (src/allocator.rs).
litek8s::use_server_allocator!();

fn main() -> ExitCode {
    litek8s::tune_allocator(litek8s::Allocator::Mimalloc);
    let called = std::env::args_os().next().unwrap_or_default();
    if Path::new(&called).file_name() == Some("litek8s-agent".as_ref()) {
        return litek8s::cli::main("litek8s-agent", litek8s::cli::parse_agent);
    }
    litek8s::cli::main("litek8s", litek8s::cli::parse)
}
