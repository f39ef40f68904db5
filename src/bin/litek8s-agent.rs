//! The `litek8s-agent` binary: the node agent alone, with the flags and configuration files of
//! `litek8s agent` (one parser, `litek8s::cli::parse_agent`).
//!
//! Why a second executable: a node runs only the agent, and the agent's memory is counted on
//! every node. The `litek8s` binary also holds the API server, Raft, the store, CEL and the
//! OpenAPI tables; the pages of its code the agent touches come with their neighbours (the
//! kernel maps code around each fault), so the agent's resident size followed the size of the
//! whole suite. This binary's `main` reaches only the agent, so the linker leaves the rest out
//! (docs/agent.md, "Two executables").
//!
//! Its allocator is glibc's (no `#[global_allocator]`): after pods come and go it gives back
//! what mimalloc kept (src/allocator.rs).

use std::process::ExitCode;

fn main() -> ExitCode {
    litek8s::tune_allocator(litek8s::Allocator::Glibc);
    litek8s::cli::main("litek8s-agent", litek8s::cli::parse_agent)
}
