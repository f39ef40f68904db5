//! Decoder tests with hand-built protobuf bytes from a tiny test-only encoder.

use serde_json::{json, Value};

use super::decode::{self, MAX_DEPTH};
use super::descriptor::Table;
use super::{decode_body, ProtoError};

/// A minimal protobuf encoder: enough to build any message the tests need.
#[derive(Default, Clone)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    fn varint_raw(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    pub fn varint(mut self, tag: u32, v: u64) -> Enc {
        self.varint_raw(u64::from(tag) << 3);
        self.varint_raw(v);
        self
    }
    pub fn bytes(mut self, tag: u32, b: &[u8]) -> Enc {
        self.varint_raw((u64::from(tag) << 3) | 2);
        self.varint_raw(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    pub fn str(self, tag: u32, s: &str) -> Enc {
        self.bytes(tag, s.as_bytes())
    }
    pub fn msg(self, tag: u32, m: Enc) -> Enc {
        self.bytes(tag, &m.0)
    }
    pub fn fixed64(mut self, tag: u32, v: u64) -> Enc {
        self.varint_raw((u64::from(tag) << 3) | 1);
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A map entry {1: key, 2: value}.
    pub fn entry(self, tag: u32, key: &str, value: Enc) -> Enc {
        let mut entry = Enc::default().str(1, key);
        entry.0.extend_from_slice(&value.0);
        self.msg(tag, entry)
    }
    /// The whole body: magic + runtime.Unknown envelope.
    pub fn envelope(api_version: &str, kind: &str, raw: Enc) -> Vec<u8> {
        let type_meta = Enc::default().str(1, api_version).str(2, kind);
        let unknown = Enc::default().msg(1, type_meta).msg(2, raw);
        let mut out = b"k8s\0".to_vec();
        out.extend_from_slice(&unknown.0);
        out
    }
}

fn e() -> Enc {
    Enc::default()
}

const TEST_TABLE: &str = r#"{"kinds":{"v1/T":"T"},"messages":{
 "T":[[1,"s","string",0],[2,"i32","int32",0],[3,"i64","int64",0],[4,"b","bool",0],
      [5,"d","double",0],[6,"bin","bytes",0],[7,"t","time",0],[8,"mt","microtime",0],
      [9,"dur","duration",0],[10,"q","quantity",0],[11,"ios","intorstring",0],
      [12,"raw","rawextension",0],[13,"f","fieldsv1",0],[14,"labels","map:string:string",0],
      [15,"bd","map:string:bytes",0],[16,"list","string",1],[17,"nums","int32",1],
      [18,"child","@T",0],[19,"children","@T",1],[20,"inl","@I",4],[21,"z","string",2],
      [22,"zb","bool",2],[23,"qs","map:string:quantity",0],[24,"kids","map:string:@T",0]],
 "I":[[1,"inner","string",0]]}}"#;

fn decode_test(raw: Enc) -> Result<Value, ProtoError> {
    let table = Table::parse(TEST_TABLE).unwrap();
    decode::message(&table, table.kind("v1", "T").unwrap(), &raw.0)
}

#[test]
fn scalars_and_presence() {
    let v = decode_test(
        e().str(1, "")
            .varint(2, (-5i64) as u64)
            .varint(3, 1 << 40)
            .varint(4, 0)
            .fixed64(5, 1.5f64.to_bits())
            .bytes(6, &[0, 0xff, 1]),
    )
    .unwrap();
    assert_eq!(
        v,
        json!({"s": "", "i32": -5, "i64": 1u64 << 40, "b": false, "d": 1.5, "bin": "AP8B"})
    );
    // Absent fields stay absent; unknown tags are skipped.
    assert_eq!(
        decode_test(e().str(99, "x").varint(98, 1)).unwrap(),
        json!({})
    );
    // omitempty non-pointer fields drop their zero value only.
    assert_eq!(
        decode_test(e().str(21, "").varint(22, 0)).unwrap(),
        json!({})
    );
    assert_eq!(
        decode_test(e().str(21, "x").varint(22, 1)).unwrap(),
        json!({"z": "x", "zb": true})
    );
}

#[test]
fn special_types() {
    let v = decode_test(
        e().msg(7, e().varint(1, 1_700_000_000).varint(2, 123_456_789))
            .msg(8, e().varint(1, 1_700_000_000).varint(2, 123_456_789))
            .msg(9, e().varint(1, 90_500_000_000))
            .msg(10, e().str(1, "100m"))
            .msg(11, e().varint(1, 0).varint(2, 8080))
            .msg(12, e().bytes(1, br#"{"a":[1,2]}"#))
            .msg(13, e().bytes(1, br#"{"f:metadata":{}}"#)),
    )
    .unwrap();
    assert_eq!(
        v,
        json!({"t": "2023-11-14T22:13:20Z", "mt": "2023-11-14T22:13:20.123456Z",
               "dur": "1m30.5s", "q": "100m", "ios": 8080, "raw": {"a": [1, 2]},
               "f": {"f:metadata": {}}})
    );
    let v = decode_test(
        e().msg(7, e())
            .msg(10, e())
            .msg(11, e().varint(1, 1).str(3, "http")),
    )
    .unwrap();
    assert_eq!(v, json!({"t": null, "q": "0", "ios": "http"}));
    assert!(decode_test(e().msg(11, e().varint(1, 7))).is_err());
    assert!(decode_test(e().msg(12, e().bytes(1, b"{nope"))).is_err());
}

#[test]
fn maps_repeated_nested_inline() {
    let v = decode_test(
        e().entry(14, "app", e().str(2, "web"))
            .entry(14, "tier", e().str(2, ""))
            .entry(14, "empty", e())
            .entry(15, "bin", e().bytes(2, b"\x00\x01"))
            .entry(23, "cpu", e().msg(2, e().str(1, "250m")))
            .entry(24, "k", e().msg(2, e().str(1, "deep")))
            .str(16, "a")
            .str(16, "b")
            .bytes(17, &[1, 2, 0x7f]) // packed
            .varint(17, 9) // unpacked, appended
            .msg(18, e().str(1, "inner").msg(18, e().varint(2, 3)))
            .msg(19, e().str(1, "x"))
            .msg(19, e())
            .msg(20, e().str(1, "inlined")),
    )
    .unwrap();
    assert_eq!(
        v,
        json!({
            "labels": {"app": "web", "tier": "", "empty": ""},
            "bd": {"bin": "AAE="},
            "qs": {"cpu": "250m"},
            "kids": {"k": {"s": "deep"}},
            "list": ["a", "b"],
            "nums": [1, 2, 127, 9],
            "child": {"s": "inner", "child": {"i32": 3}},
            "children": [{"s": "x"}, {}],
            "inner": "inlined"
        })
    );
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    // Wrong wire type for a known field.
    assert!(decode_test(e().varint(1, 1)).is_err());
    assert!(decode_test(e().str(2, "x")).is_err());
    // Every truncation of a valid message fails or decodes a prefix — never panics.
    let good = e()
        .str(1, "hello")
        .msg(18, e().str(1, "x").entry(14, "a", e().str(2, "b")))
        .msg(7, e().varint(1, 5));
    for cut in 0..good.0.len() {
        let _ = decode_test(Enc(good.0[..cut].to_vec()));
    }
    assert!(decode_test(Enc(good.0[..good.0.len() - 1].to_vec())).is_err());
    // Garbage bytes: deterministic pseudo-random input must not panic.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..2000 {
        let len = (x % 64) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let _ = decode_test(Enc(bytes.clone()));
        let _ = decode_body(&[b"k8s\0".as_slice(), &bytes].concat());
    }
}

#[test]
fn nesting_bomb_is_rejected() {
    let mut m = e().str(1, "leaf");
    for _ in 0..MAX_DEPTH + 5 {
        m = e().msg(18, m);
    }
    let err = decode_test(m).unwrap_err();
    assert!(err.to_string().contains("nested deeper"), "{err}");
    let mut ok = e();
    for _ in 0..MAX_DEPTH - 2 {
        ok = e().msg(18, ok);
    }
    assert!(decode_test(ok).is_ok());
}

#[test]
fn value_count_is_bounded() {
    // 600k empty repeated messages: 2 bytes each on the wire, a JSON object each decoded.
    let mut raw = Vec::with_capacity(1_200_000);
    for _ in 0..600_000 {
        raw.extend_from_slice(&[(19 << 3) | 2, 0]);
    }
    assert!(decode_test(Enc(raw)).is_err());
}

#[test]
fn envelopes() {
    let cm = e()
        .msg(
            1,
            e().str(1, "cm")
                .str(2, "")
                .str(3, "")
                .varint(7, 0)
                .msg(8, e()),
        )
        .entry(2, "a", e().str(2, "b"))
        .entry(3, "bin", e().bytes(2, &[0xde, 0xad]));
    let v = decode_body(&Enc::envelope("v1", "ConfigMap", cm)).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "creationTimestamp": null},
               "data": {"a": "b"}, "binaryData": {"bin": "3q0="}})
    );
    // Unknown kinds are 415-style errors; bad magic and truncation are malformed.
    assert!(matches!(
        decode_body(&Enc::envelope("v1", "Nope", e())),
        Err(ProtoError::UnknownKind { .. })
    ));
    assert!(matches!(decode_body(b"{}"), Err(ProtoError::Malformed(_))));
    let mut body = Enc::envelope("v1", "ConfigMap", e().str(1, "x"));
    body.pop();
    assert!(matches!(decode_body(&body), Err(ProtoError::Malformed(_))));
    // DeleteOptions under any group version.
    let opts = e().varint(1, 0).str(4, "Foreground").str(5, "All");
    let v = decode_body(&Enc::envelope("meta.k8s.io/v1", "DeleteOptions", opts)).unwrap();
    assert_eq!(v["gracePeriodSeconds"], 0);
    assert_eq!(v["propagationPolicy"], "Foreground");
    assert_eq!(v["dryRun"], json!(["All"]));
}

#[test]
fn pod_and_event_from_the_embedded_table() {
    let container = e()
        .str(1, "web")
        .str(2, "nginx")
        .msg(6, e().str(1, "http").varint(3, 80).str(4, "TCP"))
        .msg(
            8,
            e().entry(1, "cpu", e().msg(2, e().str(1, "500m"))).entry(
                2,
                "memory",
                e().msg(2, e().str(1, "64Mi")),
            ),
        );
    let pod = e().msg(1, e().str(1, "p").str(3, "default")).msg(
        2,
        e().msg(2, container)
            .str(3, "")
            .varint(4, 0)
            .msg(1, e().str(1, "v").msg(2, e().msg(2, e()))),
    );
    let v = decode_body(&Enc::envelope("v1", "Pod", pod)).unwrap();
    let spec = &v["spec"];
    assert_eq!(
        spec["containers"][0]["ports"][0],
        json!({"name": "http", "containerPort": 80, "protocol": "TCP"})
    );
    assert_eq!(spec["containers"][0]["resources"]["limits"]["cpu"], "500m");
    assert_eq!(
        spec["containers"][0]["resources"]["requests"]["memory"],
        "64Mi"
    );
    // restartPolicy "" is omitempty and dropped; terminationGracePeriodSeconds is a pointer
    // and its explicit 0 is kept; the embedded VolumeSource is inlined.
    assert!(spec.get("restartPolicy").is_none());
    assert_eq!(spec["terminationGracePeriodSeconds"], 0);
    assert_eq!(spec["volumes"][0], json!({"name": "v", "emptyDir": {}}));

    let event = e()
        .msg(1, e().str(1, "ev"))
        .msg(2, e().varint(1, 1_700_000_000).varint(2, 5_000))
        .str(4, "ctrl")
        .str(7, "Started");
    let v = decode_body(&Enc::envelope("events.k8s.io/v1", "Event", event)).unwrap();
    assert_eq!(v["eventTime"], "2023-11-14T22:13:20.000005Z");
    assert_eq!(v["reason"], "Started");
}
