//! Attaching to a running container's own process (`kubectl attach`) through its conmon.
//!
//! conmon serves an attach socket (`<socket-dir>/<id>/attach`, a symlink to the container
//! directory keeping the path short enough for a socket address): a SOCK_SEQPACKET socket on
//! which every message conmon sends is one byte naming the stream (2 stdout, 3 stderr, as
//! podman reads them; a terminal's output is all stdout) followed by output, and every message a client sends is
//! input for the container's stdin (conmon started with `--stdin`). A client that shuts its
//! sending side down closes the container's stdin unless conmon was told to leave it open
//! (`stdinOnce: false`). conmon closes the socket when the container exits.
//!
//! A terminal's size goes through conmon's control fifo (`<container dir>/ctl`): one line
//! `1 <height> <width>`, which conmon applies to the terminal master it holds.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use nix::sys::socket::{
    connect, recv, send, shutdown, socket, AddressFamily, MsgFlags, Shutdown, SockFlag, SockType,
    UnixAddr,
};
use tokio::io::unix::AsyncFd;

use super::{Runtime, RuntimeError};

/// Name of conmon's attach socket and control fifo.
const ATTACH_SOCKET: &str = "attach";
const CTL_FIFO: &str = "ctl";
/// conmon's largest message: 8 KiB of output after the stream byte.
pub const MAX_MESSAGE: usize = 8192 + 1;

/// The stream byte of conmon's attach messages (1 would be stdin, never sent).
pub const STDOUT: u8 = 2;
pub const STDERR: u8 = 3;

/// One client's connection to a container's conmon.
pub struct Attached {
    socket: AsyncFd<OwnedFd>,
    ctl: PathBuf,
}

impl Runtime {
    /// Connects to the attach socket of the running container `id`.
    pub fn attach(&self, id: &str) -> Result<Attached, RuntimeError> {
        let record = self.record(id)?;
        let dir = self.dir_of(&record);
        let path = self.layout.socket_dir().join(id).join(ATTACH_SOCKET);
        let what = || format!("attach to {id}");
        let fd = socket(
            AddressFamily::Unix,
            SockType::SeqPacket,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(|e| RuntimeError::io(what(), e.into()))?;
        let addr = UnixAddr::new(&path).map_err(|e| RuntimeError::io(what(), e.into()))?;
        match connect(fd.as_raw_fd(), &addr) {
            // A local socket connects at once; EINPROGRESS is not expected but harmless.
            Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => {}
            Err(e) => return Err(RuntimeError::io(what(), e.into())),
        }
        // SAFETY: the socket is owned by the AsyncFd from here on.
        let socket =
            unsafe { AsyncFd::register(fd) }.map_err(|e| RuntimeError::io(what(), e.into()))?;
        Ok(Attached {
            socket,
            ctl: dir.join(CTL_FIFO),
        })
    }
}

impl Attached {
    /// The next message: its stream and output; `None` once conmon closed the socket.
    pub async fn recv(&self, buf: &mut [u8; MAX_MESSAGE]) -> io::Result<Option<(u8, usize)>> {
        loop {
            let mut guard = self.socket.readable().await?;
            let got = guard.try_io(|fd| {
                recv(fd.get_ref().as_raw_fd(), buf, MsgFlags::empty()).map_err(io::Error::from)
            });
            match got {
                Ok(Ok(0)) => return Ok(None),
                Ok(Ok(n)) => return Ok(Some((buf[0], n))),
                Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(None),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Sends `data` as the container's input, in messages conmon reads whole.
    pub async fn send(&self, data: &[u8]) -> io::Result<()> {
        for chunk in data.chunks(MAX_MESSAGE - 1) {
            loop {
                let mut guard = self.socket.writable().await?;
                let sent = guard.try_io(|fd| {
                    send(fd.get_ref().as_raw_fd(), chunk, MsgFlags::MSG_NOSIGNAL)
                        .map_err(io::Error::from)
                });
                match sent {
                    Ok(Ok(_)) => break,
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => continue,
                }
            }
        }
        Ok(())
    }

    /// The end of this client's input (conmon closes the container's stdin unless told to
    /// leave it open).
    pub fn close_input(&self) {
        let _ = shutdown(self.socket.get_ref().as_raw_fd(), Shutdown::Write);
    }

    /// Sets the container's terminal size (nothing without a terminal).
    pub fn resize(&self, width: u16, height: u16) -> io::Result<()> {
        // Non-blocking: a conmon that is gone must not hold the session.
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&self.ctl)?;
        fifo.write_all(resize_line(width, height).as_bytes())
    }
}

/// conmon's control line for a terminal size.
fn resize_line(width: u16, height: u16) -> String {
    format!("1 {height} {width}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resize_lines_are_height_then_width() {
        assert_eq!(resize_line(91, 37), "1 37 91\n");
    }
}
