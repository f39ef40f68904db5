//! A host pseudo-terminal for a command run with a terminal (`kubectl exec -t`).
//!
//! The runtime is started in the foreground with the terminal's slave side as its standard
//! streams and as its controlling terminal (a new session). Asked for a terminal
//! (`process.terminal`), runc (and crun) then creates the container's own pty, sets the
//! host terminal raw and copies between the two; when the host terminal's size changes the
//! kernel sends SIGWINCH to it and it applies the size inside. So resizing this pty's
//! master is resizing the command's terminal, and the runtime's exit status is still the
//! command's. This is CRI-O's way; a console socket would hand us the container's pty
//! directly but needs a detached exec, whose exit nobody waits for.
//!
//! The master is read and written without blocking through the reactor; reading it once
//! every holder of the slave is gone (the runtime exited) ends with EIO, read as the end.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt, PtyMaster, Winsize};
use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
use tokio::io::unix::AsyncFd;

/// The master side of a host pseudo-terminal.
pub struct Pty {
    master: AsyncFd<PtyMaster>,
}

/// Opens a pty pair: the master, and the slave (raw, not the caller's controlling
/// terminal, closed on exec unless passed as a standard stream).
pub fn open() -> io::Result<(Pty, OwnedFd)> {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname_r(&master)?;
    let slave: OwnedFd = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map(|fd| {
        // SAFETY: `open` just returned this descriptor and nothing else owns it.
        unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }
    })?;
    // Raw from the start: output written before the runtime sets it raw itself must not
    // be echoed or have its newlines translated.
    let mut termios = tcgetattr(&slave)?;
    cfmakeraw(&mut termios);
    tcsetattr(&slave, SetArg::TCSANOW, &termios)?;
    let flags = nix::fcntl::fcntl(master.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
    nix::fcntl::fcntl(
        master.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )?;
    // SAFETY: the master is owned by the AsyncFd from here on and closed only when it goes.
    let master = unsafe { AsyncFd::register(master)? };
    Ok((Pty { master }, slave))
}

/// Makes the slave given as stdin the calling process's controlling terminal in a new
/// session; for `pre_exec`, so only async-signal-safe calls.
pub fn become_session_leader() -> io::Result<()> {
    // SAFETY: setsid and ioctl are async-signal-safe and touch no memory of ours.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Pty {
    /// Sets the terminal's size; the runtime, told by SIGWINCH, passes it on.
    pub fn resize(&self, width: u16, height: u16) -> io::Result<()> {
        let size = Winsize {
            ws_row: height,
            ws_col: width,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize from the pointer, which outlives the call.
        let rc = unsafe {
            libc::ioctl(
                self.master.get_ref().as_fd().as_raw_fd(),
                libc::TIOCSWINSZ,
                &size as *const Winsize,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Reads what the command wrote; `Ok(0)` once the slave side is closed everywhere.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.master.readable().await?;
            match guard.try_io(|fd| {
                nix::unistd::read(fd.get_ref().as_raw_fd(), buf).map_err(io::Error::from)
            }) {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `data` as the command's input.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.master.writable().await?;
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(io::Error::from))
            {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_master_reads_what_the_slave_writes_and_sizes_apply() {
        let (pty, slave) = open().unwrap();
        pty.resize(132, 43).unwrap();
        let mut size = Winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one winsize into `size`.
        let rc = unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        assert_eq!(rc, 0);
        assert_eq!((size.ws_col, size.ws_row), (132, 43));

        pty.write_all(b"in\n").await.unwrap();
        let mut buf = [0u8; 16];
        let n = nix::unistd::read(slave.as_raw_fd(), &mut buf).unwrap();
        // Raw: no echo back, no newline translation.
        assert_eq!(&buf[..n], b"in\n");
        nix::unistd::write(&slave, b"out\n").unwrap();
        let n = pty.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"out\n");
        drop(slave);
        assert_eq!(pty.read(&mut buf).await.unwrap(), 0);
    }
}
