//! Relaying one connection both ways, bytes untouched. Each direction starts by copying
//! through a 16 KiB buffer (one per thread, reused by every connection), which for the short
//! messages of API requests, answers and watch events costs the same two system calls as
//! splice without making pipes. A read
//! that fills the buffer means a bulk transfer (a large list, an image, a log): that direction
//! then switches to splice(2) through its own pipe, socket → pipe → socket, so the payload
//! no longer enters user space (HAProxy's `splice-auto` works the same way); a process out of
//! file descriptors for a pipe keeps copying. A side that reaches end of stream shuts down the
//! write half of the other, so half-closed connections (a client that sends and then waits)
//! behave as with a plain copy. Both sockets stay non-blocking; readiness comes from tokio,
//! and a read that returns less than it asked for clears it, so the next round waits for new
//! data instead of paying an EAGAIN first (as tokio's own reads do).

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use nix::sys::socket::{recv, shutdown, MsgFlags, Shutdown};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes one read moves while a direction copies; a read that fills it switches to splice.
const COPY_CHUNK: usize = 16 << 10;

thread_local! {
    /// The copy buffer of this thread: `copy_once` holds it only between two system calls,
    /// never across an await, so connections share it instead of each holding (and zeroing)
    /// their own.
    static COPY_BUFFER: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0u8; COPY_CHUNK].into_boxed_slice());
}

/// Pipe capacity asked for per spliced direction (the kernel default is 64 KiB; a larger pipe
/// means fewer splices on long streams). Refusals (a lowered `pipe-max-size`) keep the default.
const PIPE_CAPACITY: i32 = 256 << 10;

/// One direction's pipe.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        let capacity = fcntl(write.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(PIPE_CAPACITY))
            .or_else(|_| fcntl(write.as_raw_fd(), FcntlArg::F_GETPIPE_SZ))
            .map_or(64 << 10, |n| n.max(4096) as usize);
        Ok(Pipe {
            read,
            write,
            capacity,
        })
    }
}

/// How one direction moves its bytes.
enum Path {
    /// Through the thread's copy buffer (the start of every direction).
    Copy,
    /// Through a pipe, never entering user space (after a read filled the buffer).
    Splice(Pipe),
}

/// What one direction moved (the tests check it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    pub bytes: u64,
    /// Whether the direction switched to splice.
    pub spliced: bool,
}

/// When a copying direction switches to splice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Switch {
    /// After a read that filled the buffer.
    WhenFilled,
    /// Never: a direction whose pipe could not be made keeps copying (the tests also force it).
    Never,
}

/// Relays until both directions have ended; returns what moved (client → server,
/// server → client). An error in either direction ends the relay.
pub async fn relay(client: &TcpStream, server: &TcpStream) -> io::Result<(Moved, Moved)> {
    relay_with(client, server, Switch::WhenFilled).await
}

async fn relay_with(
    client: &TcpStream,
    server: &TcpStream,
    switch: Switch,
) -> io::Result<(Moved, Moved)> {
    tokio::try_join!(pump(client, server, switch), pump(server, client, switch))
}

fn splice_flags() -> SpliceFFlags {
    SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
}

fn to_io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Runs `op` (a read, write or splice of up to `asked` bytes) once `stream` is ready for
/// `interest`. A result above zero and below `asked` means the socket is drained (reading) or
/// its send buffer is full (writing): the readiness is then cleared, so the next call waits
/// for an event instead of paying an EAGAIN first. `Ok(0)` is passed through (end of stream
/// for a read; the write callers refuse it).
fn when_ready(
    stream: &TcpStream,
    interest: Interest,
    asked: usize,
    mut op: impl FnMut() -> nix::Result<usize>,
) -> io::Result<usize> {
    let mut short = None;
    match stream.try_io(interest, || match op() {
        Ok(n) if n > 0 && n < asked => {
            short = Some(n);
            Err(io::ErrorKind::WouldBlock.into())
        }
        other => other.map_err(to_io),
    }) {
        Err(_) if short.is_some() => Ok(short.unwrap_or_default()),
        other => other,
    }
}

/// A write that took no bytes of a non-empty buffer would repeat forever: an error instead.
fn took_some(written: io::Result<usize>) -> io::Result<usize> {
    match written {
        Ok(0) => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "the socket took no bytes",
        )),
        other => other,
    }
}

/// Passes end of stream on as a half-close. ENOTCONN means the other side is already gone,
/// which ends this direction too.
fn pass_end(to: &TcpStream) -> io::Result<()> {
    match shutdown(to.as_raw_fd(), Shutdown::Write) {
        Ok(()) | Err(Errno::ENOTCONN) => Ok(()),
        Err(e) => Err(to_io(e)),
    }
}

/// One read of a copying direction.
enum Copied {
    /// End of stream.
    End,
    /// `bytes` read; those the send buffer did not take are in `pending`. `filled`: the read
    /// filled the buffer.
    Bytes { bytes: usize, filled: bool },
}

/// Reads once into the thread's copy buffer and writes what it can of it at once, keeping the
/// rest in `pending`.
fn copy_once(from: &TcpStream, to: &TcpStream, pending: &mut Vec<u8>) -> io::Result<Copied> {
    COPY_BUFFER.with(|buffer| {
        let mut buffer = buffer.borrow_mut();
        let buf = &mut buffer[..];
        let asked = buf.len();
        let bytes = when_ready(from, Interest::READABLE, asked, || {
            recv(from.as_raw_fd(), buf, MsgFlags::empty())
        })?;
        if bytes == 0 {
            return Ok(Copied::End);
        }
        let mut written = 0;
        while written < bytes {
            match took_some(to.try_write(&buf[written..bytes])) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    pending.extend_from_slice(&buf[written..bytes]);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Copied::Bytes {
            bytes,
            filled: bytes == asked,
        })
    })
}

/// Moves everything `from` sends into `to`, then shuts down `to`'s write half.
async fn pump(from: &TcpStream, to: &TcpStream, mut switch: Switch) -> io::Result<Moved> {
    let mut moved = Moved::default();
    let mut path = Path::Copy;
    let mut pending = Vec::new();
    loop {
        from.readable().await?;
        match &path {
            Path::Copy => {
                let filled = match copy_once(from, to, &mut pending) {
                    Ok(Copied::End) => return pass_end(to).map(|()| moved),
                    Ok(Copied::Bytes { bytes, filled }) => {
                        moved.bytes += bytes as u64;
                        filled
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                };
                while !pending.is_empty() {
                    to.writable().await?;
                    match took_some(when_ready(to, Interest::WRITABLE, pending.len(), || {
                        nix::sys::socket::send(to.as_raw_fd(), &pending, MsgFlags::empty())
                    })) {
                        Ok(n) => drop(pending.drain(..n)),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
                if filled && switch == Switch::WhenFilled {
                    match Pipe::new() {
                        Ok(pipe) => {
                            path = Path::Splice(pipe);
                            moved.spliced = true;
                        }
                        // Out of descriptors: copy the rest of this direction rather than
                        // ask again (and fail again) at every full read.
                        Err(e) => {
                            tracing::debug!("no pipe for splice ({e}); copying");
                            switch = Switch::Never;
                        }
                    }
                }
            }
            Path::Splice(pipe) => {
                let filled = match when_ready(from, Interest::READABLE, pipe.capacity, || {
                    splice(
                        from.as_fd(),
                        None,
                        pipe.write.as_fd(),
                        None,
                        pipe.capacity,
                        splice_flags(),
                    )
                }) {
                    Ok(0) => return pass_end(to).map(|()| moved),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                };
                let mut left = filled;
                while left > 0 {
                    to.writable().await?;
                    match took_some(when_ready(to, Interest::WRITABLE, left, || {
                        splice(
                            pipe.read.as_fd(),
                            None,
                            to.as_fd(),
                            None,
                            left,
                            splice_flags(),
                        )
                    })) {
                        Ok(n) => {
                            left -= n;
                            moved.bytes += n as u64;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
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

    /// user <-> (client side | relay | server side) <-> backend: the user sends `request`
    /// and half-closes; the backend, after `backend_delay`, reads it all, answers `answer`
    /// and closes. Checks both arrive unchanged and returns what the relay reports.
    async fn exchange(
        request: Vec<u8>,
        answer: Vec<u8>,
        switch: Switch,
        backend_delay: std::time::Duration,
    ) -> (Moved, Moved) {
        let (mut user, client) = pair().await;
        let (server, mut backend) = pair().await;
        let relay = tokio::spawn(async move { relay_with(&client, &server, switch).await });
        let (sent, expected) = (request.clone(), answer.clone());
        let user_side = tokio::spawn(async move {
            user.write_all(&sent).await.unwrap();
            // The user is done sending but still reads the answer (half-close).
            user.shutdown().await.unwrap();
            let mut got = Vec::new();
            user.read_to_end(&mut got).await.unwrap();
            got
        });
        tokio::time::sleep(backend_delay).await;
        let mut got = Vec::new();
        backend.read_to_end(&mut got).await.unwrap();
        assert!(got == request, "request changed on the way");
        backend.write_all(&answer).await.unwrap();
        drop(backend);
        let received = user_side.await.unwrap();
        assert!(received == expected, "answer changed on the way");
        let (up, down) = relay.await.unwrap().unwrap();
        assert_eq!(
            (up.bytes, down.bytes),
            (request.len() as u64, answer.len() as u64)
        );
        (up, down)
    }

    fn pattern(len: u32, mul: u32, modulo: u32) -> Vec<u8> {
        (0..len).map(|i| (i * mul % modulo) as u8).collect()
    }

    #[tokio::test]
    async fn bulk_transfers_switch_to_splice_and_pass_bytes_and_half_close_untouched() {
        let (up, down) = exchange(
            pattern(3_000_000, 7, 251),
            pattern(5_000_000, 13, 241),
            Switch::WhenFilled,
            std::time::Duration::ZERO,
        )
        .await;
        assert!(up.spliced && down.spliced, "{up:?} {down:?}");
    }

    #[tokio::test]
    async fn short_messages_are_copied_without_pipes() {
        let (up, down) = exchange(
            b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            pattern(2_000, 3, 256),
            Switch::WhenFilled,
            std::time::Duration::ZERO,
        )
        .await;
        assert!(!up.spliced && !down.spliced, "{up:?} {down:?}");
    }

    #[tokio::test]
    async fn a_copying_direction_keeps_what_a_full_send_buffer_refused() {
        // The backend reads nothing for a while, so the relay's writes towards it fill the
        // socket buffers and the rest waits in `pending`; nothing may be lost or reordered.
        let (up, _) = exchange(
            pattern(32 << 20, 31, 253),
            b"done".to_vec(),
            Switch::Never,
            std::time::Duration::from_millis(300),
        )
        .await;
        assert!(!up.spliced);
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
        let ended =
            tokio::time::timeout(std::time::Duration::from_secs(5), relay(&client, &server)).await;
        assert!(ended.is_ok(), "the relay did not end after both peers left");
    }
}
