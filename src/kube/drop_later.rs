//! Frees values on a background thread instead of the caller's.
//!
//! The Raft thread applies every write of the cluster one after another, and freeing a
//! write's object (a tree of maps and strings allocated by the API thread that parsed it) is a
//! measurable part of that. Objects the store no longer needs are sent here and freed by a
//! thread of their own. If that thread cannot be started, values are freed in place.

use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};

type Garbage = Box<dyn Send>;

/// Frees `value` on the background thread (or here, if there is none).
pub fn drop_later<T: Send + 'static>(value: T) {
    static SENDER: OnceLock<Option<Mutex<Sender<Garbage>>>> = OnceLock::new();
    let sender = SENDER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Garbage>();
        std::thread::Builder::new()
            .name("litek8s-free".into())
            .spawn(move || rx.into_iter().for_each(drop))
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let value: Garbage = Box::new(value);
    let Some(sender) = sender else {
        return;
    };
    // A poisoned lock still holds a usable sender; a send fails only if the thread is gone,
    // and then the value comes back and is freed here.
    let sender = sender
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Err(mpsc::SendError(value)) = sender.send(value) {
        drop(value);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;

    /// Counts its drops, and those that happened on the thread that created it.
    struct Counted {
        dropped: Arc<AtomicUsize>,
        on_creator: Arc<AtomicUsize>,
        creator: std::thread::ThreadId,
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
            if std::thread::current().id() == self.creator {
                self.on_creator.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    #[test]
    fn every_value_is_dropped_off_the_calling_thread() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let on_creator = Arc::new(AtomicUsize::new(0));
        let counted = || Counted {
            dropped: dropped.clone(),
            on_creator: on_creator.clone(),
            creator: std::thread::current().id(),
        };
        for _ in 0..100 {
            drop_later(vec![counted(), counted()]);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while dropped.load(Ordering::SeqCst) < 200 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(dropped.load(Ordering::SeqCst), 200);
        assert_eq!(
            on_creator.load(Ordering::SeqCst),
            0,
            "freed on the caller's thread"
        );
    }
}
