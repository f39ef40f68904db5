//! Assembles an API server process: data directory, certificates and tokens, listeners (TLS
//! and plain HTTP on one port), authentication, readiness and the background loops.
