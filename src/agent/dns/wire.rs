//! The DNS wire format (RFC 1035, EDNS0 of RFC 6891), as much as the responder needs: a
//! query's header, its one question and its OPT record read; answers written with the
//! question's name compressed (a pointer to offset 12) and the TC bit set when they do not
//! fit; TTLs found in a forwarded answer so a cached copy can be aged.
//!
//! ```text
//! header (12 bytes): id u16 | flags u16 (QR opcode:4 AA TC RD RA Z:3 RCODE:4) | qd an ns ar u16
//! question:          name (labels, ≤ 63 bytes each, ≤ 255 in all) | type u16 | class u16
//! record:            name | type u16 | class u16 | ttl u32 | rdlength u16 | rdata
//! ```
//!
//! Nothing here trusts the input: every read is bounds-checked, compression pointers may only
//! point backwards and are followed at most 64 times, so a hostile packet is a value
//! ([`Parsed::Drop`] or a FORMERR), never a panic or a loop.

use std::net::{Ipv4Addr, Ipv6Addr};

pub const TYPE_A: u16 = 1;
pub const TYPE_NS: u16 = 2;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_SOA: u16 = 6;
pub const TYPE_PTR: u16 = 12;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_SRV: u16 = 33;
pub const TYPE_OPT: u16 = 41;
pub const TYPE_ANY: u16 = 255;
pub const CLASS_IN: u16 = 1;

pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_FORMERR: u8 = 1;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;
pub const RCODE_NOTIMP: u8 = 4;
pub const RCODE_REFUSED: u8 = 5;

const FLAG_QR: u16 = 0x8000;
const FLAG_AA: u16 = 0x0400;
const FLAG_TC: u16 = 0x0200;
const FLAG_RD: u16 = 0x0100;
const FLAG_RA: u16 = 0x0080;
const HEADER: usize = 12;
/// The size every DNS client accepts over UDP without EDNS0.
pub const CLASSIC_UDP_SIZE: usize = 512;
/// The largest EDNS0 size honoured (DNS flag day 2020 advises 1232; 4096 is BIND's default).
pub const MAX_UDP_SIZE: usize = 4096;
const MAX_NAME: usize = 255;
const MAX_POINTERS: usize = 64;

/// A query's one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The name as it came on the wire (its case kept), uncompressed, root label included.
    pub wire_name: Vec<u8>,
    /// The name in lower case, dotted, without the final dot (`""` for the root).
    pub name: String,
    pub qtype: u16,
    pub qclass: u16,
}

/// A query worth answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    pub recursion_desired: bool,
    pub question: Question,
    /// The EDNS0 UDP payload size, when the query had an OPT record.
    pub edns_size: Option<u16>,
    /// The header and question as they came, for forwarding.
    pub question_end: usize,
}

impl Query {
    /// The largest UDP answer the client takes.
    pub fn udp_limit(&self) -> usize {
        match self.edns_size {
            Some(size) => (size as usize).clamp(CLASSIC_UDP_SIZE, MAX_UDP_SIZE),
            None => CLASSIC_UDP_SIZE,
        }
    }
}

/// What a packet turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Query(Query),
    /// Readable enough to answer with an error code (FORMERR, NOTIMP) and no question.
    Refuse {
        id: u16,
        rcode: u8,
    },
    /// Not worth an answer: shorter than a header, or itself an answer (answering those
    /// would let two responders bounce packets forever).
    Drop,
}

/// Reads a query.
pub fn parse_query(buf: &[u8]) -> Parsed {
    if buf.len() < HEADER {
        return Parsed::Drop;
    }
    let id = be16(buf, 0);
    let flags = be16(buf, 2);
    if flags & FLAG_QR != 0 {
        return Parsed::Drop;
    }
    let refuse = |rcode| Parsed::Refuse { id, rcode };
    if (flags >> 11) & 0xf != 0 {
        return refuse(RCODE_NOTIMP);
    }
    let (qd, an, ns, ar) = (be16(buf, 4), be16(buf, 6), be16(buf, 8), be16(buf, 10));
    if qd != 1 {
        return refuse(RCODE_FORMERR);
    }
    let Some((labels, mut at)) = read_name(buf, HEADER) else {
        return refuse(RCODE_FORMERR);
    };
    if at + 4 > buf.len() {
        return refuse(RCODE_FORMERR);
    }
    let qtype = be16(buf, at);
    let qclass = be16(buf, at + 2);
    at += 4;
    let question_end = at;
    // A query has no answers; its additional section may hold the OPT record.
    let mut edns_size = None;
    for i in 0..(an as usize + ns as usize + ar as usize) {
        let Some(record) = skip_record(buf, at) else {
            return refuse(RCODE_FORMERR);
        };
        if i >= an as usize + ns as usize && record.rtype == TYPE_OPT {
            edns_size = Some(record.class);
        }
        at = record.end;
    }
    Parsed::Query(Query {
        id,
        recursion_desired: flags & FLAG_RD != 0,
        question: Question {
            wire_name: encode_labels(&labels),
            name: dotted_lower(&labels),
            qtype,
            qclass,
        },
        edns_size,
        question_end,
    })
}

/// The data of a record the responder writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RData {
    A(Ipv4Addr),
    Aaaa(Ipv6Addr),
    Cname(String),
    Ptr(String),
    Ns(String),
    Srv {
        priority: u16,
        weight: u16,
        port: u16,
        target: String,
    },
    Soa {
        mname: String,
        rname: String,
        serial: u32,
        refresh: u32,
        retry: u32,
        expire: u32,
        minimum: u32,
    },
}

impl RData {
    pub fn rtype(&self) -> u16 {
        match self {
            RData::A(_) => TYPE_A,
            RData::Aaaa(_) => TYPE_AAAA,
            RData::Cname(_) => TYPE_CNAME,
            RData::Ptr(_) => TYPE_PTR,
            RData::Ns(_) => TYPE_NS,
            RData::Srv { .. } => TYPE_SRV,
            RData::Soa { .. } => TYPE_SOA,
        }
    }
}

/// One record; `name` lower case and dotted like [`Question::name`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub name: String,
    pub ttl: u32,
    pub data: RData,
}

/// An answer the responder made itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    pub rcode: u8,
    pub authoritative: bool,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
}

/// Writes `response` to `query`; when it is longer than `limit`, only the header (TC set),
/// the question and the OPT record are sent, and the client asks again over TCP.
pub fn encode(query: &Query, response: &Response, limit: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_header(&mut out, query, response.rcode, response.authoritative);
    out.extend_from_slice(&query.question.wire_name);
    put16(&mut out, query.question.qtype);
    put16(&mut out, query.question.qclass);
    let sections = [&response.answers, &response.authority, &response.additional];
    for (i, section) in sections.iter().enumerate() {
        for record in section.iter() {
            write_record(&mut out, &query.question.name, record);
        }
        set16(&mut out, 6 + 2 * i, section.len() as u16);
    }
    let with_opt = |out: &mut Vec<u8>| {
        if query.edns_size.is_some() {
            write_opt(out);
            let ar = be16(out, 10) + 1;
            set16(out, 10, ar);
        }
    };
    with_opt(&mut out);
    if out.len() > limit {
        out.truncate(HEADER + query.question.wire_name.len() + 4);
        for count in [6, 8, 10] {
            set16(&mut out, count, 0);
        }
        let flags = be16(&out, 2) | FLAG_TC;
        set16(&mut out, 2, flags);
        with_opt(&mut out);
    }
    out
}

/// An answer carrying only an error code (FORMERR, SERVFAIL, …) for `query`.
pub fn encode_error(query: &Query, rcode: u8) -> Vec<u8> {
    let response = Response {
        rcode,
        ..Response::default()
    };
    encode(query, &response, MAX_UDP_SIZE)
}

/// An answer with an error code and no question, to a packet that could not be read.
pub fn encode_refusal(id: u16, rcode: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER);
    put16(&mut out, id);
    put16(&mut out, FLAG_QR | rcode as u16);
    out.extend_from_slice(&[0; 8]);
    out
}

fn write_header(out: &mut Vec<u8>, query: &Query, rcode: u8, authoritative: bool) {
    put16(out, query.id);
    let mut flags = FLAG_QR | FLAG_RA | rcode as u16;
    if query.recursion_desired {
        flags |= FLAG_RD;
    }
    if authoritative {
        flags |= FLAG_AA;
    }
    put16(out, flags);
    put16(out, 1);
    out.extend_from_slice(&[0; 6]);
}

fn write_opt(out: &mut Vec<u8>) {
    out.push(0);
    put16(out, TYPE_OPT);
    put16(out, MAX_UDP_SIZE as u16);
    out.extend_from_slice(&[0, 0, 0, 0]);
    put16(out, 0);
}

fn write_record(out: &mut Vec<u8>, question: &str, record: &Record) {
    write_name(out, question, &record.name);
    put16(out, record.data.rtype());
    put16(out, CLASS_IN);
    out.extend_from_slice(&record.ttl.to_be_bytes());
    let length_at = out.len();
    put16(out, 0);
    match &record.data {
        RData::A(ip) => out.extend_from_slice(&ip.octets()),
        RData::Aaaa(ip) => out.extend_from_slice(&ip.octets()),
        RData::Cname(name) | RData::Ptr(name) | RData::Ns(name) => write_name(out, question, name),
        RData::Srv {
            priority,
            weight,
            port,
            target,
        } => {
            put16(out, *priority);
            put16(out, *weight);
            put16(out, *port);
            // RFC 2782: the target is not compressed.
            write_plain_name(out, target);
        }
        RData::Soa {
            mname,
            rname,
            serial,
            refresh,
            retry,
            expire,
            minimum,
        } => {
            write_name(out, question, mname);
            write_name(out, question, rname);
            for v in [serial, refresh, retry, expire, minimum] {
                out.extend_from_slice(&v.to_be_bytes());
            }
        }
    }
    let length = (out.len() - length_at - 2) as u16;
    set16(out, length_at, length);
}

/// A name, as a pointer to the question when it is the question's name.
fn write_name(out: &mut Vec<u8>, question: &str, name: &str) {
    if name == question {
        put16(out, 0xc000 | HEADER as u16);
    } else {
        write_plain_name(out, name);
    }
}

fn write_plain_name(out: &mut Vec<u8>, name: &str) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        let label = &label.as_bytes()[..label.len().min(63)];
        out.push(label.len() as u8);
        out.extend_from_slice(label);
    }
    out.push(0);
}

/// What [`skip_record`] learned of a record.
struct Skipped {
    rtype: u16,
    class: u16,
    ttl_at: usize,
    end: usize,
}

fn skip_record(buf: &[u8], at: usize) -> Option<Skipped> {
    let (_, at) = read_name(buf, at)?;
    if at + 10 > buf.len() {
        return None;
    }
    let length = be16(buf, at + 8) as usize;
    let end = at + 10 + length;
    if end > buf.len() {
        return None;
    }
    Some(Skipped {
        rtype: be16(buf, at),
        class: be16(buf, at + 2),
        ttl_at: at + 4,
        end,
    })
}

/// An upstream's answer as the forwarder keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub rcode: u8,
    pub truncated: bool,
    /// Offsets of every TTL (the OPT record's "TTL" is flags and is left out).
    pub ttl_offsets: Vec<usize>,
    /// The smallest TTL, or the SOA's minimum for an answer without records.
    pub min_ttl: Option<u32>,
}

/// Reads the shape of an upstream's answer to `query`: `None` when it is not an answer to it.
pub fn parse_upstream(buf: &[u8], id: u16) -> Option<Upstream> {
    if buf.len() < HEADER || be16(buf, 0) != id || be16(buf, 2) & FLAG_QR == 0 {
        return None;
    }
    let flags = be16(buf, 2);
    let mut at = HEADER;
    for _ in 0..be16(buf, 4) {
        at = read_name(buf, at)?.1 + 4;
    }
    let records = be16(buf, 6) as usize + be16(buf, 8) as usize + be16(buf, 10) as usize;
    let mut ttl_offsets = Vec::new();
    let mut min_ttl: Option<u32> = None;
    for _ in 0..records {
        let record = skip_record(buf, at)?;
        if record.rtype != TYPE_OPT {
            let ttl = be32(buf, record.ttl_at);
            ttl_offsets.push(record.ttl_at);
            min_ttl = Some(min_ttl.map_or(ttl, |m| m.min(ttl)));
        }
        at = record.end;
    }
    Some(Upstream {
        rcode: (flags & 0xf) as u8,
        truncated: flags & FLAG_TC != 0,
        ttl_offsets,
        min_ttl,
    })
}

/// Sets the id of a message.
pub fn set_id(buf: &mut [u8], id: u16) {
    if buf.len() >= 2 {
        buf[..2].copy_from_slice(&id.to_be_bytes());
    }
}

/// Cuts an upstream's answer that is too long for a UDP client down to its header and
/// question, TC set.
pub fn truncate_answer(buf: &mut Vec<u8>, question_end: usize) {
    buf.truncate(question_end.min(buf.len()));
    for count in [6, 8, 10] {
        if buf.len() >= count + 2 {
            buf[count..count + 2].copy_from_slice(&[0, 0]);
        }
    }
    if buf.len() >= 4 {
        let flags = be16(buf, 2) | FLAG_TC;
        buf[2..4].copy_from_slice(&flags.to_be_bytes());
    }
}

/// The address, CNAME, PTR and SRV records of an answer section (names decompressed): an
/// upstream's, to be appended to an answer of the responder's own, or, for clients, any.
pub fn upstream_answers(buf: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    if buf.len() < HEADER {
        return out;
    }
    let mut at = HEADER;
    for _ in 0..be16(buf, 4) {
        match read_name(buf, at) {
            Some((_, end)) => at = end + 4,
            None => return out,
        }
    }
    for _ in 0..be16(buf, 6) {
        let Some((labels, _)) = read_name(buf, at) else {
            return out;
        };
        let Some(record) = skip_record(buf, at) else {
            return out;
        };
        let rdata = &buf[record.end - be16(buf, record.ttl_at + 4) as usize..record.end];
        let data = match record.rtype {
            TYPE_A if rdata.len() == 4 => Some(RData::A(Ipv4Addr::new(
                rdata[0], rdata[1], rdata[2], rdata[3],
            ))),
            TYPE_AAAA if rdata.len() == 16 => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(rdata);
                Some(RData::Aaaa(Ipv6Addr::from(octets)))
            }
            TYPE_CNAME => read_name(buf, record.end - rdata.len())
                .map(|(target, _)| RData::Cname(dotted_lower(&target))),
            TYPE_PTR => read_name(buf, record.end - rdata.len())
                .map(|(target, _)| RData::Ptr(dotted_lower(&target))),
            TYPE_SRV if rdata.len() > 6 => {
                read_name(buf, record.end - rdata.len() + 6).map(|(target, _)| RData::Srv {
                    priority: be16(rdata, 0),
                    weight: be16(rdata, 2),
                    port: be16(rdata, 4),
                    target: dotted_lower(&target),
                })
            }
            _ => None,
        };
        if let Some(data) = data {
            out.push(Record {
                name: dotted_lower(&labels),
                ttl: be32(buf, record.ttl_at),
                data,
            });
        }
        at = record.end;
    }
    out
}

/// Reads the name at `at`: its labels and where the data after it starts.
fn read_name(buf: &[u8], mut at: usize) -> Option<(Vec<Vec<u8>>, usize)> {
    let mut labels = Vec::new();
    let mut total = 1;
    let mut end = None;
    let mut jumps = 0;
    loop {
        let len = *buf.get(at)? as usize;
        match len & 0xc0 {
            0x00 => {
                if len == 0 {
                    return Some((labels, end.unwrap_or(at + 1)));
                }
                let label = buf.get(at + 1..at + 1 + len)?;
                total += len + 1;
                if total > MAX_NAME {
                    return None;
                }
                labels.push(label.to_vec());
                at += 1 + len;
            }
            0xc0 => {
                if at + 1 >= buf.len() {
                    return None;
                }
                let target = (be16(buf, at) & 0x3fff) as usize;
                jumps += 1;
                // Backwards only: a pointer forward or to itself could loop.
                if target >= at || jumps > MAX_POINTERS {
                    return None;
                }
                end.get_or_insert(at + 2);
                at = target;
            }
            _ => return None,
        }
    }
}

fn encode_labels(labels: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(labels.iter().map(|l| l.len() + 1).sum::<usize>() + 1);
    for label in labels {
        out.push(label.len() as u8);
        out.extend_from_slice(label);
    }
    out.push(0);
    out
}

/// The lower-case dotted form; a label holding a dot or a byte outside printable ASCII is
/// written as `\DDD`, so that it can never be mistaken for a cluster name.
fn dotted_lower(labels: &[Vec<u8>]) -> String {
    let mut out = String::new();
    for (i, label) in labels.iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        for &b in label {
            if b.is_ascii_graphic() && b != b'.' && b != b'\\' {
                out.push(b.to_ascii_lowercase() as char);
            } else {
                out.push_str(&format!("\\{b:03}"));
            }
        }
    }
    out
}

fn be16(buf: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([buf[at], buf[at + 1]])
}

fn be32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

fn put16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn set16(out: &mut [u8], at: usize, v: u16) {
    out[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// A query for `name` and `qtype` (tests, benchmarks and the forwarder's own lookups).
pub fn build_query(id: u16, name: &str, qtype: u16, edns_size: Option<u16>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    put16(&mut out, id);
    put16(&mut out, FLAG_RD);
    put16(&mut out, 1);
    put16(&mut out, 0);
    put16(&mut out, 0);
    put16(&mut out, edns_size.is_some() as u16);
    write_plain_name(&mut out, name);
    put16(&mut out, qtype);
    put16(&mut out, CLASS_IN);
    if let Some(size) = edns_size {
        out.push(0);
        put16(&mut out, TYPE_OPT);
        put16(&mut out, size);
        out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16, edns: Option<u16>) -> Query {
        match parse_query(&build_query(7, name, qtype, edns)) {
            Parsed::Query(q) => q,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_query_is_read_with_its_case_and_edns_size() {
        let q = query("Web.Default.svc.cluster.local", TYPE_A, Some(1232));
        assert_eq!(q.id, 7);
        assert!(q.recursion_desired);
        assert_eq!(q.question.name, "web.default.svc.cluster.local");
        assert_eq!(&q.question.wire_name[1..4], b"Web");
        assert_eq!(q.question.qtype, TYPE_A);
        assert_eq!(q.udp_limit(), 1232);
        assert_eq!(query("x", TYPE_A, None).udp_limit(), 512);
        assert_eq!(query("x", TYPE_A, Some(100)).udp_limit(), 512);
        assert_eq!(query("x", TYPE_A, Some(65000)).udp_limit(), 4096);
    }

    #[test]
    fn bad_packets_are_values() {
        assert_eq!(parse_query(&[1, 2, 3]), Parsed::Drop);
        let mut answer = build_query(9, "a", TYPE_A, None);
        answer[2] |= 0x80;
        assert_eq!(parse_query(&answer), Parsed::Drop);
        let mut two = build_query(9, "a", TYPE_A, None);
        two[5] = 2;
        assert_eq!(
            parse_query(&two),
            Parsed::Refuse {
                id: 9,
                rcode: RCODE_FORMERR
            }
        );
        let mut update = build_query(9, "a", TYPE_A, None);
        update[2] |= 5 << 3;
        assert_eq!(
            parse_query(&update),
            Parsed::Refuse {
                id: 9,
                rcode: RCODE_NOTIMP
            }
        );
        // A name pointing at itself, a name cut short, a label over 63 bytes.
        let mut looped = build_query(9, "a", TYPE_A, None);
        looped.truncate(12);
        looped.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        assert!(matches!(parse_query(&looped), Parsed::Refuse { .. }));
        let mut short = build_query(9, "abc", TYPE_A, None);
        short.truncate(15);
        assert!(matches!(parse_query(&short), Parsed::Refuse { .. }));
        let mut long = build_query(9, "a", TYPE_A, None);
        long[12] = 0x40;
        assert!(matches!(parse_query(&long), Parsed::Refuse { .. }));
        // A name longer than 255 bytes.
        let name = vec!["a".repeat(60); 5].join(".");
        assert!(matches!(
            parse_query(&build_query(1, &name, TYPE_A, None)),
            Parsed::Refuse { .. }
        ));
    }

    #[test]
    fn junk_of_every_size_never_panics() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in (0..600).chain([4096, 65535]) {
            let mut buf = vec![0u8; len];
            for b in buf.iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *b = seed as u8;
            }
            if len > 2 {
                buf[2] &= 0x7f;
            }
            let _ = parse_query(&buf);
            let _ = parse_upstream(&buf, 0);
        }
    }

    #[test]
    fn answers_compress_the_question_and_truncate() {
        let q = query("web.default.svc.cluster.local", TYPE_A, None);
        let record = |i: u8| Record {
            name: q.question.name.clone(),
            ttl: 5,
            data: RData::A(Ipv4Addr::new(10, 43, 0, i)),
        };
        let response = Response {
            authoritative: true,
            answers: vec![record(1)],
            ..Response::default()
        };
        let out = encode(&q, &response, 512);
        let shape = parse_upstream(&out, 7).unwrap();
        assert_eq!(shape.min_ttl, Some(5));
        assert!(!shape.truncated);
        // header + question (31 + 4) + pointer (2) + type, class, ttl, length (10) + 4
        assert_eq!(out.len(), 12 + 35 + 16);
        assert_eq!(&out[out.len() - 4..], &[10, 43, 0, 1]);
        let many = Response {
            answers: (0..40).map(record).collect(),
            ..Response::default()
        };
        let out = encode(&q, &many, 512);
        let shape = parse_upstream(&out, 7).unwrap();
        assert!(shape.truncated);
        assert_eq!(out.len(), 12 + 35);
        let q = query("web.default.svc.cluster.local", TYPE_A, Some(1232));
        let out = encode(&q, &many, q.udp_limit());
        assert!(!parse_upstream(&out, 7).unwrap().truncated);
        assert_eq!(be16(&out, 6), 40);
        assert_eq!(be16(&out, 10), 1, "the OPT record");
    }
}
