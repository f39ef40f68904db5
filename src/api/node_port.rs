//! NodePort allocation from 30000–32767, the same way ClusterIPs are allocated
//! (`cluster_ip`): the store is the record of what is in use (every Service's
//! `spec.ports[].nodePort`), and the allocator only adds the ports handed out to writes that
//! have not been applied yet, so a port is never given twice and is free again once the
//! Service that held it is deleted (or stops being NodePort/LoadBalancer).
//!
//! The choice is made by the handler before the Mutation exists (the store stays
//! deterministic). In a cluster every client write is forwarded to the leader, and every write
//! first passes the ReadIndex barrier, so the leader's store plus its pending set is the whole
//! picture: this allocator runs in one place at a time.

use std::collections::HashSet;

use super::in_flight::{AsOf, InFlight};

/// The service node port range kube-apiserver uses by default.
pub const RANGE: std::ops::RangeInclusive<u16> = 30000..=32767;

/// Why a port could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error("range is full")]
    Full,
    #[error("provided port is not in the valid range. The range of valid ports is 30000-32767")]
    OutOfRange,
    #[error("provided port is already allocated")]
    InUse,
    /// The snapshot of ports in use predates too many releases to be checked.
    #[error("too many concurrent allocations, try again")]
    Stale,
}

/// Hands out NodePorts.
#[derive(Default)]
pub struct NodePortAllocator {
    in_flight: InFlight<u16>,
}

/// A port held for a write in flight; released when dropped.
pub struct PortReservation<'a> {
    allocator: &'a NodePortAllocator,
    pub port: u16,
}

impl Drop for PortReservation<'_> {
    fn drop(&mut self) {
        self.allocator.in_flight.release(self.port);
    }
}

impl NodePortAllocator {
    pub fn new() -> Self {
        NodePortAllocator::default()
    }

    /// The mark to take before reading the store for the ports in use (see `in_flight`).
    pub fn as_of(&self) -> AsOf {
        self.in_flight.as_of()
    }

    /// A free port, given the ports the store shows in use in a snapshot taken after
    /// `as_of`. Starts at a random offset so that concurrent servers of different clusters do
    /// not hand out the same sequence.
    pub fn allocate(
        &self,
        used: &HashSet<u16>,
        as_of: AsOf,
    ) -> Result<PortReservation<'_>, PortError> {
        let (first, last) = (*RANGE.start() as u32, *RANGE.end() as u32);
        let span = last - first + 1;
        let start = rand::random::<u32>() % span;
        let port = self
            .in_flight
            .choose(as_of)
            .map_err(|_| PortError::Stale)?
            .hold_first((0..span).map(|i| (first + (start + i) % span) as u16), used)
            .ok_or(PortError::Full)?;
        Ok(PortReservation {
            allocator: self,
            port,
        })
    }

    /// Reserves a port the client asked for.
    pub fn reserve(
        &self,
        port: i64,
        used: &HashSet<u16>,
        as_of: AsOf,
    ) -> Result<PortReservation<'_>, PortError> {
        let port = u16::try_from(port)
            .ok()
            .filter(|p| RANGE.contains(p))
            .ok_or(PortError::OutOfRange)?;
        let mut choosing = self.in_flight.choose(as_of).map_err(|_| PortError::Stale)?;
        if !choosing.hold(port, used) {
            return Err(PortError::InUse);
        }
        Ok(PortReservation {
            allocator: self,
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_twice_until_released() {
        let alloc = NodePortAllocator::new();
        let used: HashSet<u16> = [30000, 30001].into();
        let mut held = Vec::new();
        while let Ok(r) = alloc.allocate(&used, alloc.as_of()) {
            held.push(r);
        }
        assert_eq!(held.len(), RANGE.len() - 2);
        let distinct: HashSet<u16> = held.iter().map(|r| r.port).collect();
        assert_eq!(distinct.len(), held.len());
        assert!(!distinct.contains(&30000));
        assert_eq!(
            alloc.allocate(&used, alloc.as_of()).err(),
            Some(PortError::Full)
        );
        let freed = held.pop().map(|r| r.port);
        assert_eq!(
            alloc.allocate(&used, alloc.as_of()).ok().map(|r| r.port),
            freed
        );
    }

    #[test]
    fn explicit_ports() {
        let alloc = NodePortAllocator::new();
        let used: HashSet<u16> = [31000].into();
        assert_eq!(
            alloc.reserve(31000, &used, alloc.as_of()).err(),
            Some(PortError::InUse)
        );
        let r = alloc.reserve(31001, &used, alloc.as_of()).unwrap();
        assert_eq!(
            alloc.reserve(31001, &used, alloc.as_of()).err(),
            Some(PortError::InUse)
        );
        drop(r);
        assert!(alloc.reserve(31001, &used, alloc.as_of()).is_ok());
        for bad in [80, 29999, 32768, 70000, -1] {
            assert_eq!(
                alloc.reserve(bad, &used, alloc.as_of()).err(),
                Some(PortError::OutOfRange),
                "{bad}"
            );
        }
    }
}
