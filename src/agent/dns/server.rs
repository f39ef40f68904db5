//! The responder's sockets: UDP (answers cut to 512 bytes or the client's EDNS0 size, with
//! the TC bit, so the client asks again over TCP) and TCP (two-byte length framing, several
//! queries per connection, idle connections closed). Cluster names are answered inline on
//! the receiving task; forwarded questions get a task each, bounded in number. A packet that
//! cannot be read is dropped or answered FORMERR, and logged at most once per interval with
//! the count of the ones not logged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::answer::{self, Outcome};
use super::forward::Forwarder;
use super::wire::{self, Parsed, Query, RCODE_SERVFAIL};
use super::zone::Zone;

/// Forwarded questions in flight at most; more are answered SERVFAIL at once.
const MAX_FORWARDS: usize = 1024;
/// TCP connections at most.
const MAX_TCP: usize = 256;
/// A TCP connection with no query for this long is closed.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// At most one log line about bad packets per this interval.
const BAD_PACKET_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The zone as last built; replaced whole.
pub type ZoneHandle = Arc<RwLock<Arc<Zone>>>;

/// What answers queries.
pub struct Responder {
    pub zone: ZoneHandle,
    pub forwarder: Forwarder,
    forwards: Semaphore,
    bad: Mutex<BadPackets>,
}

struct BadPackets {
    last: Option<Instant>,
    unlogged: u64,
}

/// What a packet needs.
enum Handled {
    Reply(Vec<u8>),
    Forward(Query),
    Chase(Query, answer::Outcome),
    Nothing,
}

impl Responder {
    pub fn new(zone: ZoneHandle, forwarder: Forwarder) -> Responder {
        Responder {
            zone,
            forwarder,
            forwards: Semaphore::new(MAX_FORWARDS),
            bad: Mutex::new(BadPackets {
                last: None,
                unlogged: 0,
            }),
        }
    }

    /// Answers `packet` if it can be answered without waiting.
    fn handle_now(&self, packet: &[u8], peer: SocketAddr, limit: Option<usize>) -> Handled {
        let query = match wire::parse_query(packet) {
            Parsed::Query(q) => q,
            Parsed::Refuse { id, rcode } => {
                self.bad_packet(peer, packet.len());
                return Handled::Reply(wire::encode_refusal(id, rcode));
            }
            Parsed::Drop => {
                self.bad_packet(peer, packet.len());
                return Handled::Nothing;
            }
        };
        let zone = self.zone.read().clone();
        let q = &query.question;
        match answer::answer(&zone, &q.name, q.qtype) {
            Outcome::Local(response) => {
                let limit = limit.unwrap_or_else(|| query.udp_limit());
                Handled::Reply(wire::encode(&query, &response, limit))
            }
            Outcome::Forward => Handled::Forward(query),
            chase @ Outcome::Chase { .. } => Handled::Chase(query, chase),
        }
    }

    /// The answer to `query` from upstream (or SERVFAIL).
    async fn handle_later(
        &self,
        packet: &[u8],
        handled: Handled,
        limit: Option<usize>,
    ) -> Option<Vec<u8>> {
        let Ok(_permit) = self.forwards.try_acquire() else {
            return match handled {
                Handled::Forward(q) | Handled::Chase(q, _) => {
                    Some(wire::encode_error(&q, RCODE_SERVFAIL))
                }
                _ => None,
            };
        };
        match handled {
            Handled::Forward(query) => {
                let answer = self
                    .forwarder
                    .forward(packet, &query, limit.is_some())
                    .await;
                Some(match answer {
                    Some(mut answer) => {
                        let limit = limit.unwrap_or_else(|| query.udp_limit());
                        if answer.len() > limit {
                            wire::truncate_answer(&mut answer, query.question_end);
                        }
                        answer
                    }
                    None => wire::encode_error(&query, RCODE_SERVFAIL),
                })
            }
            Handled::Chase(
                query,
                Outcome::Chase {
                    mut response,
                    target,
                },
            ) => {
                if let Some(upstream) = self.forwarder.resolve(&target, query.question.qtype).await
                {
                    response.answers.extend(wire::upstream_answers(&upstream));
                }
                let limit = limit.unwrap_or_else(|| query.udp_limit());
                Some(wire::encode(&query, &response, limit))
            }
            Handled::Reply(r) => Some(r),
            _ => None,
        }
    }

    /// Answers one packet (over TCP, or for callers that do not mind waiting).
    pub async fn handle(
        &self,
        packet: &[u8],
        peer: SocketAddr,
        limit: Option<usize>,
    ) -> Option<Vec<u8>> {
        match self.handle_now(packet, peer, limit) {
            Handled::Reply(r) => Some(r),
            Handled::Nothing => None,
            later => self.handle_later(packet, later, limit).await,
        }
    }

    fn bad_packet(&self, peer: SocketAddr, len: usize) {
        let mut bad = self.bad.lock();
        let due = bad
            .last
            .is_none_or(|t| t.elapsed() >= BAD_PACKET_LOG_INTERVAL);
        if due {
            tracing::warn!(
                component = "dns",
                %peer,
                len,
                not_logged = bad.unlogged,
                "dropped or refused a DNS packet that could not be read ({} more since the last such line)",
                bad.unlogged
            );
            bad.last = Some(Instant::now());
            bad.unlogged = 0;
        } else {
            bad.unlogged += 1;
        }
    }
}

/// Answers UDP queries on `socket` until `stop`.
pub async fn serve_udp(socket: UdpSocket, responder: Arc<Responder>, stop: CancellationToken) {
    let socket = Arc::new(socket);
    let mut buf = vec![0u8; 65535];
    loop {
        let (n, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(component = "dns", "udp receive: {e}");
                    continue;
                }
            },
        };
        let packet = &buf[..n];
        match responder.handle_now(packet, peer, None) {
            Handled::Reply(answer) => {
                let _ = socket.send_to(&answer, peer).await;
            }
            Handled::Nothing => {}
            later => {
                let (socket, responder, packet) =
                    (socket.clone(), responder.clone(), packet.to_vec());
                tokio::spawn(async move {
                    if let Some(answer) = responder.handle_later(&packet, later, None).await {
                        let _ = socket.send_to(&answer, peer).await;
                    }
                });
            }
        }
    }
}

/// Answers TCP connections on `listener` until `stop`.
pub async fn serve_tcp(listener: TcpListener, responder: Arc<Responder>, stop: CancellationToken) {
    let connections = Arc::new(Semaphore::new(MAX_TCP));
    loop {
        let permit = tokio::select! {
            _ = stop.cancelled() => return,
            p = connections.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.accept() => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::debug!(component = "dns", "tcp accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (responder, stop) = (responder.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = connection(stream, peer, &responder) => {}
            }
            drop(permit);
        });
    }
}

async fn connection(mut stream: TcpStream, peer: SocketAddr, responder: &Responder) {
    let mut buf = vec![0u8; 65535];
    loop {
        let len = match tokio::time::timeout(TCP_IDLE, stream.read_u16()).await {
            Ok(Ok(len)) => len as usize,
            _ => return,
        };
        match tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut buf[..len])).await {
            Ok(Ok(_)) => {}
            _ => return,
        }
        let Some(answer) = responder
            .handle(&buf[..len], peer, Some(u16::MAX as usize))
            .await
        else {
            // Nothing worth answering: the client is not speaking DNS.
            return;
        };
        let mut framed = Vec::with_capacity(answer.len() + 2);
        framed.extend_from_slice(&(answer.len() as u16).to_be_bytes());
        framed.extend_from_slice(&answer);
        if stream.write_all(&framed).await.is_err() {
            return;
        }
    }
}
