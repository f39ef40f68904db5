//! `objects.wal` damage, with the real binary: a flipped byte in the middle of the log refuses
//! to start with a one-line error naming the file and an offset; a tail cut short by a few
//! bytes (the unfinished write of a crash) starts with a warning, keeps every earlier write and
//! accepts new ones that survive the next restart.

mod support;

use std::path::Path;

use litek8s::storage::record::{self, Decoded};
use serde_json::json;
use support::{configmap, Server};

const WRITES: usize = 100;

/// (start offset, payload length, end offset) of every whole record from the file's start.
fn records(wal: &[u8]) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut offset = 0;
    while let Decoded::Record { payload, next, .. } = record::decode_at(wal, offset) {
        out.push((offset, payload.len(), next));
        offset = next;
    }
    out
}

/// Starts a server, writes `WRITES` ConfigMaps, SIGKILLs it (so the log holds Mutation records,
/// not a shutdown checkpoint). Returns the server, stopped.
fn server_with_writes() -> Server {
    let mut server = Server::start(&[]);
    let rt = support::runtime();
    let api = server.api();
    rt.block_on(async {
        let mut conn = api.connect().await.expect("connect");
        for i in 0..WRITES {
            let body = configmap(
                "default",
                &format!("cm-{i:03}"),
                json!({"i": i.to_string()}),
            );
            let resp = conn
                .request(
                    "POST",
                    "/api/v1/namespaces/default/configmaps",
                    Some("application/json"),
                    serde_json::to_vec(&body).expect("serialize"),
                )
                .await
                .expect("create");
            assert_eq!(resp.status, 201, "{}", resp.text());
        }
    });
    server.kill();
    server
}

fn read_wal(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read objects.wal")
}

#[test]
fn flipped_byte_in_the_middle_refuses_to_start() {
    let mut server = server_with_writes();
    let wal_path = server.wal_path();
    let mut wal = read_wal(&wal_path);
    let recs = records(&wal);
    assert!(
        recs.len() > WRITES / 2,
        "objects.wal holds only {} whole records after {WRITES} writes",
        recs.len()
    );
    let (start, payload_len, _) = recs[recs.len() / 2];
    let flipped_at = start + record::HEADER_LEN + payload_len / 2;
    wal[flipped_at] ^= 0x5a;
    std::fs::write(&wal_path, &wal).expect("write damaged objects.wal");

    let status = server
        .start_expecting_exit()
        .unwrap_or_else(|| panic!("server started on a damaged log; log:\n{}", server.logs()));
    assert!(!status.success(), "exit status {status} on a damaged log");

    let logs = server.logs();
    let last_start = std::fs::read_to_string(server.log_path(2)).unwrap_or_default();
    let error_lines: Vec<&str> = last_start
        .lines()
        .filter(|l| l.contains("objects.wal") && l.to_lowercase().contains("offset"))
        .collect();
    assert!(
        !error_lines.is_empty(),
        "no line names objects.wal and an offset; log:\n{logs}"
    );
    let names_offset = error_lines
        .iter()
        .any(|l| l.contains(&start.to_string()) || l.contains(&flipped_at.to_string()));
    assert!(
        names_offset,
        "error does not name offset {start} (record) or {flipped_at} (byte): {error_lines:?}"
    );
    // The file is left as it was for an operator to inspect: refusing must not "repair" it.
    assert_eq!(
        read_wal(&wal_path),
        wal,
        "objects.wal was modified by the refused start"
    );
}

#[test]
fn truncated_tail_starts_with_a_warning() {
    let mut server = server_with_writes();
    let wal_path = server.wal_path();
    let wal = read_wal(&wal_path);
    let recs = records(&wal);
    let (_, _, end) = *recs.last().expect("at least one record");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&wal_path)
        .expect("open objects.wal");
    file.set_len((end - 3) as u64)
        .expect("truncate objects.wal");
    drop(file);

    if let Some(status) = server.start_expecting_exit() {
        panic!(
            "server refused a log with a torn tail ({status}); log:\n{}",
            server.logs()
        );
    }
    let last_start = std::fs::read_to_string(server.log_path(2)).unwrap_or_default();
    let warning = last_start.lines().find(|l| {
        let l = l.to_lowercase();
        l.contains("warn") && (l.contains("tail") || l.contains("truncat") || l.contains("torn"))
    });
    assert!(
        warning.is_some(),
        "no warning line about the truncated tail; log:\n{last_start}"
    );

    // Every write but the cut one is there.
    let rt = support::runtime();
    let api = server.api();
    let list = rt
        .block_on(api.get("/api/v1/namespaces/default/configmaps"))
        .expect("list");
    assert_eq!(list.status, 200, "{}", list.text());
    let names: Vec<String> = list.json()["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .filter(|n| n.starts_with("cm-"))
        .collect();
    for i in 0..WRITES - 1 {
        let name = format!("cm-{i:03}");
        assert!(names.contains(&name), "{name} lost after tail repair");
    }
    // The last ConfigMap is gone only if the cut record was its create (the server's own lease
    // renewals may have been written after it).
    let last_name = format!("cm-{:03}", WRITES - 1);
    let (last_start_off, last_len, _) = *recs.last().expect("at least one record");
    let cut_payload =
        &wal[last_start_off + record::HEADER_LEN..last_start_off + record::HEADER_LEN + last_len];
    let cut_was_last_create = cut_payload
        .windows(last_name.len())
        .any(|w| w == last_name.as_bytes());
    assert_eq!(
        names.contains(&last_name),
        !cut_was_last_create,
        "{last_name} present={} but the cut record {} its create",
        names.contains(&last_name),
        if cut_was_last_create {
            "was"
        } else {
            "was not"
        }
    );

    // The repaired log takes new writes that survive another crash.
    let resp = rt
        .block_on(api.post_json(
            "/api/v1/namespaces/default/configmaps",
            &configmap("default", "after-repair", json!({"k": "v"})),
        ))
        .expect("create after repair");
    assert_eq!(resp.status, 201, "{}", resp.text());
    server.kill();
    server.spawn_and_wait();
    let resp = rt
        .block_on(
            server
                .api()
                .get("/api/v1/namespaces/default/configmaps/after-repair"),
        )
        .expect("get after second restart");
    assert_eq!(resp.status, 200, "{}", resp.text());
}
