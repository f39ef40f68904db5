//! The fuzz checks of `fuzz/harness/` on stable Rust, in every test run: the starting corpus,
//! every input the fuzzers found that once broke something (`fuzz/regressions/<target>/`),
//! and a few hundred random mutations of the corpus. The coverage-guided search itself runs
//! by hand under `cargo fuzz` (fuzz/README.md); this keeps what it found from coming back.
//!
//! `LITEK8S_FUZZ_SEED` picks the mutations (a failure prints the seed it used);
//! `LITEK8S_FUZZ_MUTATIONS` sets how many per corpus file.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[path = "../fuzz/harness/api_request.rs"]
mod api_request;
#[path = "../fuzz/harness/disk_open.rs"]
mod disk_open;
#[path = "../fuzz/harness/scratch.rs"]
mod scratch;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(String, Vec<u8>)> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("a corpus file");
            (p.display().to_string(), bytes)
        })
        .collect();
    files.sort();
    files
}

fn seed() -> u64 {
    std::env::var("LITEK8S_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen())
}

fn mutations_per_file(default: usize) -> usize {
    std::env::var("LITEK8S_FUZZ_MUTATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One random edit of the kinds libFuzzer makes: flip a bit, set a byte to an edge value,
/// insert or erase a run, copy a stretch from another input.
fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, other: &[u8]) {
    const EDGES: &[u8] = &[
        0, 1, 0x7f, 0x80, 0xff, b'"', b'{', b'}', b'[', b']', b':', b'\n',
    ];
    let len = input.len();
    match rng.gen_range(0..6) {
        0 if len > 0 => {
            let at = rng.gen_range(0..len);
            input[at] ^= 1 << rng.gen_range(0..8);
        }
        1 if len > 0 => {
            let at = rng.gen_range(0..len);
            input[at] = EDGES[rng.gen_range(0..EDGES.len())];
        }
        2 => {
            let at = rng.gen_range(0..=len);
            let run: Vec<u8> = (0..rng.gen_range(1..16)).map(|_| rng.gen()).collect();
            input.splice(at..at, run);
        }
        3 if len > 0 => {
            let at = rng.gen_range(0..len);
            let end = (at + rng.gen_range(1..64)).min(len);
            input.drain(at..end);
        }
        4 if !other.is_empty() => {
            let from = rng.gen_range(0..other.len());
            let end = (from + rng.gen_range(1..256)).min(other.len());
            let at = rng.gen_range(0..=len);
            input.splice(at..at, other[from..end].iter().copied());
        }
        _ if len > 0 => input.truncate(rng.gen_range(0..len)),
        _ => input.push(rng.gen()),
    }
}

/// Set by any panic in the process, including one in a task or thread the check started,
/// which `catch_unwind` around the check would not see (libFuzzer aborts on those).
static PANICKED: AtomicBool = AtomicBool::new(false);

/// Whether `check(input)` ran without a panic anywhere.
fn passes(check: fn(&[u8]), input: &[u8]) -> bool {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info);
        }));
    });
    PANICKED.store(false, Ordering::SeqCst);
    let returned = std::panic::catch_unwind(|| check(input)).is_ok();
    returned && !PANICKED.load(Ordering::SeqCst)
}

/// Runs `check` on every corpus file, then on `per_file` mutations of each (1 to 4 edits).
fn exercise(target: &str, corpus: &[(String, Vec<u8>)], per_file: usize, check: fn(&[u8])) {
    // One target at a time, so that a panic is charged to the input that caused it.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let regressions = files_in(&fuzz_dir().join("regressions").join(target));
    for (name, bytes) in corpus.iter().chain(&regressions) {
        if !passes(check, bytes) {
            panic!("{target}: {name} fails the check");
        }
    }
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    for (name, bytes) in corpus {
        for _ in 0..per_file {
            let mut input = bytes.clone();
            let other = &corpus[rng.gen_range(0..corpus.len())].1;
            for _ in 0..rng.gen_range(1..=4) {
                mutate(&mut rng, &mut input, other);
            }
            if !passes(check, &input) {
                let kept = std::env::temp_dir().join(format!("litek8s-fuzz-{target}-{seed}"));
                std::fs::write(&kept, &input).expect("keep the failing input");
                panic!(
                    "{target}: a mutation of {name} fails the check (LITEK8S_FUZZ_SEED={seed}); \
                     input kept in {}",
                    kept.display()
                );
            }
        }
    }
}

#[test]
fn api_requests_from_the_corpus_and_its_mutations_get_kubernetes_answers() {
    let corpus_dir = tempfile::tempdir().expect("tempdir");
    let status = Command::new("python3")
        .arg(fuzz_dir().join("seeds/make_seeds.py"))
        .arg(corpus_dir.path())
        .status()
        .expect("python3 runs");
    assert!(status.success(), "make_seeds.py failed");
    let corpus = files_in(corpus_dir.path());
    assert!(corpus.len() >= 40, "only {} seeds", corpus.len());
    exercise(
        "api_request",
        &corpus,
        mutations_per_file(8),
        api_request::run,
    );
}

#[test]
fn wal_and_raft_log_files_from_the_corpus_and_their_mutations_open_or_fail_cleanly() {
    let corpus_dir = tempfile::tempdir().expect("tempdir");
    disk_open::make_seeds(corpus_dir.path());
    let corpus = files_in(corpus_dir.path());
    assert_eq!(corpus.len(), 7, "make_seeds writes 3 WALs and 4 logs");
    exercise("disk_open", &corpus, mutations_per_file(60), disk_open::run);
}
