//! How a followed log (`logs -f`) learns that its file grew: an inotify watch on the
//! container's log directory, which reports a write to any file in it (the line conmon just
//! wrote), a file created or moved in (a rotation, a newer instance's log) and one moved out,
//! so a line goes to the client as soon as it is written instead of at the next poll. Where
//! inotify cannot be had (the per-user limit of instances reached) the follower sleeps
//! [`FOLLOW_POLL`] between reads, as it always did.
//!
//! It runs on the follower's blocking thread: epoll on the inotify descriptor gives the wait
//! a limit, so the follower still looks at the container's state and at a client that went
//! away while nothing is written.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

/// How long a follower without inotify sleeps between reads of its file.
pub const FOLLOW_POLL: Duration = Duration::from_millis(50);

/// Wakes a follower when its directory changes.
pub enum Wake {
    Watched {
        inotify: Inotify,
        epoll: Epoll,
    },
    /// No inotify: the follower polls.
    Polling,
}

impl Wake {
    /// Watches `dir` (the container's log directory); polls if that cannot be done.
    pub fn new(dir: &Path) -> Wake {
        match watch(dir) {
            Ok((inotify, epoll)) => Wake::Watched { inotify, epoll },
            Err(e) => {
                tracing::debug!(
                    component = "streams",
                    "{}: no inotify ({e}); following by polling every {} ms",
                    dir.display(),
                    FOLLOW_POLL.as_millis()
                );
                Wake::Polling
            }
        }
    }

    /// Blocks until something in the directory changed or `limit` passed (polling: until
    /// [`FOLLOW_POLL`] passed, or `limit` if shorter).
    pub fn wait(&self, limit: Duration) {
        match self {
            Wake::Polling => std::thread::sleep(FOLLOW_POLL.min(limit)),
            Wake::Watched { inotify, epoll } => {
                let millis = u16::try_from(limit.as_millis()).unwrap_or(u16::MAX);
                let mut ready = [EpollEvent::empty()];
                match epoll.wait(&mut ready, millis) {
                    // What the events were does not matter: the follower reads the file
                    // and checks for a rotation either way.
                    Ok(n) if n > 0 => {
                        while matches!(inotify.read_events(), Ok(e) if !e.is_empty()) {}
                    }
                    Ok(_) | Err(nix::Error::EINTR) => {}
                    Err(e) => {
                        tracing::debug!(component = "streams", "waiting on inotify: {e}");
                        std::thread::sleep(FOLLOW_POLL.min(limit));
                    }
                }
            }
        }
    }
}

fn watch(dir: &Path) -> nix::Result<(Inotify, Epoll)> {
    let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    inotify.add_watch(
        dir,
        AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_CLOSE_WRITE,
    )?;
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    epoll.add(inotify.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
    Ok((inotify, epoll))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::time::Instant;

    #[test]
    fn a_write_in_the_directory_ends_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let wake = Wake::new(dir.path());
        assert!(matches!(wake, Wake::Watched { .. }), "inotify in tests");
        // The creation is queued: the first wait returns at once.
        let mut file = std::fs::File::create(dir.path().join("0.log")).unwrap();
        let started = Instant::now();
        wake.wait(Duration::from_secs(30));
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "woken by the creation"
        );
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            writeln!(file, "a line").unwrap();
        });
        let started = Instant::now();
        wake.wait(Duration::from_secs(30));
        let waited = started.elapsed();
        writer.join().unwrap();
        assert!(waited < Duration::from_secs(30), "woken by the write");
        // The file's closing came after the write: taken without waiting.
        wake.wait(Duration::ZERO);
        // Nothing written since: the wait lasts its limit.
        let started = Instant::now();
        wake.wait(Duration::from_millis(200));
        assert!(started.elapsed() >= Duration::from_millis(150));
    }
}
