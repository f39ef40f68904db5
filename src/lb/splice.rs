//! Zero-copy relaying of one connection with splice(2): each direction moves bytes from its
//! source socket into a pipe and from the pipe into the other socket, so the payload never
//! enters user space (the way HAProxy relays TCP). A side that reaches end of stream shuts
//! down the write half of the other, so half-closed connections (a client that sends and
//! then waits) behave as with a plain copy. Both sockets stay non-blocking; readiness comes
//! from tokio and each splice runs inside `try_io`, so a spurious wake-up costs one EAGAIN.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::sys::socket::{shutdown, Shutdown};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Pipe capacity asked for per direction (the kernel default is 64 KiB; a larger pipe means
/// fewer splices on long streams). Refusals (a lowered `pipe-max-size`) keep the default.
const PIPE_CAPACITY: i32 = 256 << 10;

/// One direction's pipe and the bytes waiting in it.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let capacity = {
            use std::os::fd::AsRawFd;
            fcntl(write.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE_CAPACITY))
                .or_else(|_| fcntl(write.as_raw_fd(), FcntlArg::F_GETPIPE_SZ))
                .map_or(64 << 10, |n| n.max(4096) as usize)
        };
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }
}

/// The pipes for both directions, made before the relay starts so a process out of file
/// descriptors falls back to copying instead of failing the connection.
pub struct Pipes {
    client_to_server: Pipe,
    server_to_client: Pipe,
}

impl Pipes {
    pub fn new() -> io::Result<Pipes> {
        Ok(Pipes {
            client_to_server: Pipe::new()?,
            server_to_client: Pipe::new()?,
        })
    }
}

/// Relays until both directions have ended; returns the bytes moved (client → server,
/// server → client). An error in either direction ends the relay.
pub async fn relay(client: &TcpStream, server: &TcpStream, pipes: Pipes) -> io::Result<(u64, u64)> {
    let Pipes {
        client_to_server,
        server_to_client,
    } = pipes;
    tokio::try_join!(
        pump(client, server, client_to_server),
        pump(server, client, server_to_client)
    )
}

fn flags() -> SpliceFFlags {
    SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
}

fn to_io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Moves everything `from` sends into `to`, then shuts down `to`'s write half.
async fn pump(from: &TcpStream, to: &TcpStream, pipe: Pipe) -> io::Result<u64> {
    let mut moved = 0u64;
    loop {
        from.readable().await?;
        // A splice that moves less than it asked for has drained the socket: the closure
        // then reports WouldBlock (keeping the count in `short`) so tokio clears the
        // readiness and the next round waits for new data instead of paying an EAGAIN
        // splice first, as tokio's own reads do.
        let mut short = None;
        let filled = match from.try_io(Interest::READABLE, || {
            match splice(
                from.as_fd(),
                None,
                pipe.write.as_fd(),
                None,
                pipe.capacity,
                flags(),
            ) {
                Ok(n) if n > 0 && n < pipe.capacity => {
                    short = Some(n);
                    Err(io::ErrorKind::WouldBlock.into())
                }
                other => other.map_err(to_io),
            }
        }) {
            Err(_) if short.is_some() => short.unwrap_or_default(),
            Ok(0) => {
                // End of stream (or a reset peer's orderly close): pass the half-close on.
                // ENOTCONN means the other side is already gone, which ends this side too.
                match shutdown(std::os::fd::AsRawFd::as_raw_fd(to), Shutdown::Write) {
                    Ok(()) | Err(Errno::ENOTCONN) => return Ok(moved),
                    Err(e) => return Err(to_io(e)),
                }
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        let mut left = filled;
        while left > 0 {
            to.writable().await?;
            // Likewise a short write means the socket's send buffer is full.
            let mut short = None;
            match to.try_io(Interest::WRITABLE, || {
                match splice(pipe.read.as_fd(), None, to.as_fd(), None, left, flags()) {
                    Ok(n) if n > 0 && n < left => {
                        short = Some(n);
                        Err(io::ErrorKind::WouldBlock.into())
                    }
                    other => other.map_err(to_io),
                }
            }) {
                Err(_) if short.is_some() => {
                    let n = short.unwrap_or_default();
                    left -= n;
                    moved += n as u64;
                }
                // The pipe holds `left` bytes, so moving none would repeat forever.
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        "splice moved nothing out of a non-empty pipe",
                    ))
                }
                Ok(n) => {
                    left -= n;
                    moved += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A connected pair of sockets on loopback.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (connected, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (connected.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn bytes_pass_both_ways_untouched_and_half_close_is_passed_on() {
        // user <-> (client side | relay | server side) <-> backend
        let (mut user, client) = pair().await;
        let (server, mut backend) = pair().await;
        let relay = tokio::spawn(async move {
            relay(&client, &server, Pipes::new().unwrap())
                .await
                .unwrap()
        });
        let request: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let answer: Vec<u8> = (0..5_000_000u32).map(|i| (i * 13 % 241) as u8).collect();
        let (sent, expected) = (request.clone(), answer.clone());
        let user_side = tokio::spawn(async move {
            user.write_all(&sent).await.unwrap();
            // The user is done sending but still reads the answer (half-close).
            user.shutdown().await.unwrap();
            let mut got = Vec::new();
            user.read_to_end(&mut got).await.unwrap();
            got
        });
        let mut got = Vec::new();
        backend.read_to_end(&mut got).await.unwrap();
        assert!(got == request, "request changed on the way");
        backend.write_all(&answer).await.unwrap();
        drop(backend);
        let received = user_side.await.unwrap();
        assert!(received == expected, "answer changed on the way");
        let (up, down) = relay.await.unwrap();
        assert_eq!((up, down), (request.len() as u64, answer.len() as u64));
    }

    #[tokio::test]
    async fn a_reset_peer_ends_the_relay_with_an_error_or_an_end() {
        let (user, client) = pair().await;
        let (server, backend) = pair().await;
        // Close the user abruptly with unread data pending on its side: an RST.
        let abort = nix::libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        nix::sys::socket::setsockopt(&user, nix::sys::socket::sockopt::Linger, &abort).unwrap();
        drop(user);
        drop(backend);
        let ended = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            relay(&client, &server, Pipes::new().unwrap()),
        )
        .await;
        assert!(ended.is_ok(), "the relay did not end after both peers left");
    }
}
