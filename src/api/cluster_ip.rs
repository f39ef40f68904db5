//! ClusterIP allocation from the service CIDR. The store is the record of what is in use (every
//! Service's `spec.clusterIP`); the allocator only adds the addresses handed out to writes that
//! have not been applied yet, so the same address is never given twice. The CIDR's network
//! address is never used; its first address (the `kubernetes` Service's) is only given when
//! asked for.

use std::collections::HashSet;
use std::net::IpAddr;

use super::in_flight::{AsOf, InFlight};

/// Why an address could not be allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("the service CIDR {0:?} is not a valid CIDR")]
    BadCidr(String),
    #[error("range is full")]
    Full,
    #[error("provided IP is not in the valid range. The range of valid IPs is {0}")]
    OutOfRange(String),
    #[error("provided IP is already allocated")]
    InUse,
    /// The snapshot of addresses in use predates too many releases to be checked.
    #[error("too many concurrent allocations, try again")]
    Stale,
}

/// A parsed CIDR as a numeric range.
#[derive(Debug, Clone, Copy)]
struct Range {
    base: u128,
    size: u128,
    v6: bool,
}

fn parse_cidr(cidr: &str) -> Option<Range> {
    let (addr, prefix) = cidr.trim().split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    let prefix: u32 = prefix.parse().ok()?;
    let (value, bits, v6) = match addr {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32, false),
        IpAddr::V6(a) => (u128::from(a), 128, true),
    };
    if prefix > bits || prefix == 0 {
        return None;
    }
    let host_bits = bits - prefix;
    // Cap huge IPv6 ranges: the first 2^20 addresses are plenty for Services.
    let size = 1u128 << host_bits.min(20);
    let mask = if host_bits >= 128 {
        0
    } else {
        !((1u128 << host_bits) - 1)
    };
    Some(Range {
        base: value & mask,
        size,
        v6,
    })
}

fn to_ip(range: &Range, offset: u128) -> IpAddr {
    let value = range.base + offset;
    if range.v6 {
        IpAddr::V6(value.into())
    } else {
        IpAddr::V4((value as u32).into())
    }
}

/// Hands out ClusterIPs.
pub struct ClusterIpAllocator {
    cidr: String,
    range: Option<Range>,
    in_flight: InFlight<IpAddr>,
}

/// An address held for a write in flight; released when dropped (by then the write has either
/// been applied, making the store the record, or failed).
pub struct Reservation<'a> {
    allocator: &'a ClusterIpAllocator,
    pub ip: IpAddr,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.allocator.in_flight.release(self.ip);
    }
}

impl ClusterIpAllocator {
    pub fn new(cidr: &str) -> Self {
        ClusterIpAllocator {
            cidr: cidr.to_string(),
            range: parse_cidr(cidr),
            in_flight: InFlight::default(),
        }
    }

    /// Allocatable offsets: skip the network address and the first address; on IPv4 also the
    /// broadcast address.
    fn offsets(range: &Range) -> (u128, u128) {
        let end = if range.v6 { range.size } else { range.size - 1 };
        (2, end)
    }

    /// The mark to take before reading the store for the addresses in use (see `in_flight`).
    pub fn as_of(&self) -> AsOf {
        self.in_flight.as_of()
    }

    /// A free address, given the addresses the store shows in use in a snapshot taken after
    /// `as_of`.
    pub fn allocate(
        &self,
        used: &HashSet<IpAddr>,
        as_of: AsOf,
    ) -> Result<Reservation<'_>, AllocError> {
        let range = self
            .range
            .ok_or_else(|| AllocError::BadCidr(self.cidr.clone()))?;
        let (first, end) = Self::offsets(&range);
        if end <= first {
            return Err(AllocError::Full);
        }
        let span = end - first;
        let start = rand::random::<u64>() as u128 % span;
        let ip = self
            .in_flight
            .choose(as_of)
            .map_err(|_| AllocError::Stale)?
            .hold_first(
                (0..span).map(|i| to_ip(&range, first + (start + i) % span)),
                used,
            )
            .ok_or(AllocError::Full)?;
        Ok(Reservation {
            allocator: self,
            ip,
        })
    }

    /// Reserves an address the client asked for.
    pub fn reserve(
        &self,
        ip: IpAddr,
        used: &HashSet<IpAddr>,
        as_of: AsOf,
    ) -> Result<Reservation<'_>, AllocError> {
        let range = self
            .range
            .ok_or_else(|| AllocError::BadCidr(self.cidr.clone()))?;
        let value = match ip {
            IpAddr::V4(a) if !range.v6 => u128::from(u32::from(a)),
            IpAddr::V6(a) if range.v6 => u128::from(a),
            _ => return Err(AllocError::OutOfRange(self.cidr.clone())),
        };
        // The first address is never handed out by `allocate` but may be asked for: the
        // `kubernetes` Service asks for it, through the API like any other Service.
        let (_, end) = Self::offsets(&range);
        if value < range.base + 1 || value >= range.base + end {
            return Err(AllocError::OutOfRange(self.cidr.clone()));
        }
        let mut choosing = self
            .in_flight
            .choose(as_of)
            .map_err(|_| AllocError::Stale)?;
        if !choosing.hold(ip, used) {
            return Err(AllocError::InUse);
        }
        Ok(Reservation {
            allocator: self,
            ip,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_twice_and_skips_reserved() {
        let alloc = ClusterIpAllocator::new("10.96.0.0/29");
        let used: HashSet<IpAddr> = ["10.96.0.3".parse().unwrap()].into();
        let mut held = Vec::new();
        while let Ok(r) = alloc.allocate(&used, alloc.as_of()) {
            held.push(r);
        }
        let mut ips: Vec<String> = held.iter().map(|r| r.ip.to_string()).collect();
        ips.sort();
        assert_eq!(ips, ["10.96.0.2", "10.96.0.4", "10.96.0.5", "10.96.0.6"]);
        held.pop();
        assert!(alloc.allocate(&used, alloc.as_of()).is_ok());
    }

    #[test]
    fn explicit_addresses() {
        let alloc = ClusterIpAllocator::new("10.96.0.0/16");
        let used = HashSet::new();
        let r = alloc
            .reserve("10.96.3.4".parse().unwrap(), &used, alloc.as_of())
            .unwrap();
        assert_eq!(
            alloc
                .reserve("10.96.3.4".parse().unwrap(), &used, alloc.as_of())
                .err(),
            Some(AllocError::InUse)
        );
        drop(r);
        assert!(alloc
            .reserve("10.96.3.4".parse().unwrap(), &used, alloc.as_of())
            .is_ok());
        // The first address only when asked for (the `kubernetes` Service); the network
        // address never.
        assert!(alloc
            .reserve("10.96.0.1".parse().unwrap(), &used, alloc.as_of())
            .is_ok());
        assert!(alloc
            .reserve("10.96.0.0".parse().unwrap(), &used, alloc.as_of())
            .is_err());
        assert!(alloc
            .reserve("10.97.0.5".parse().unwrap(), &used, alloc.as_of())
            .is_err());
        let nonsense = ClusterIpAllocator::new("nonsense");
        assert!(nonsense.allocate(&used, nonsense.as_of()).is_err());
    }
}
