//! Printers for events (core/v1 and events.k8s.io/v1), endpointslices and leases.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::format::{age, array, int, list_with_more, name, since, text, timestamp, At};
use super::{col, wide, Column, Printer, AGE, NAME};

pub(super) static PRINTERS: &[Printer] = &[
    Printer {
        group: "",
        kind: "Event",
        columns: EVENT,
        cells: core_event,
    },
    Printer {
        group: "events.k8s.io",
        kind: "Event",
        columns: EVENT,
        cells: events_event,
    },
    Printer {
        group: "discovery.k8s.io",
        kind: "EndpointSlice",
        columns: ENDPOINTSLICE,
        cells: endpointslice,
    },
    Printer {
        group: "coordination.k8s.io",
        kind: "Lease",
        columns: LEASE,
        cells: lease,
    },
];

/// kube-apiserver prints both Event versions from the internal type, so the columns match.
const EVENT: &[Column] = &[
    col("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
    col("Type", "Type of this event (Normal, Warning), new types could be added in the future"),
    col("Reason", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
    col("Object", "The object that this event is about."),
    wide("Subobject", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]."),
    wide("Source", "The component reporting this event. Should be a short machine understandable string."),
    col("Message", "A human-readable description of the status of this operation."),
    wide("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
    wide("Count", "The number of times this event has occurred."),
    super::Column { priority: 1, ..NAME },
];

/// The fields `printEvent` reads, under their core/v1 or events.k8s.io/v1 names.
struct EventFields<'a> {
    obj: &'a Value,
    involved: &'a str,
    first: &'a str,
    last: &'a str,
    count: &'a str,
    message: &'a str,
    source_component: &'a str,
    source_host: &'a str,
}

const CORE_FIELDS: EventFields<'static> = EventFields {
    obj: &Value::Null,
    involved: "/involvedObject",
    first: "/firstTimestamp",
    last: "/lastTimestamp",
    count: "/count",
    message: "/message",
    source_component: "/source/component",
    source_host: "/source/host",
};

fn core_event(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    event(EventFields { obj, ..CORE_FIELDS }, now)
}

fn events_event(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    event(
        EventFields {
            obj,
            involved: "/regarding",
            first: "/deprecatedFirstTimestamp",
            last: "/deprecatedLastTimestamp",
            count: "/deprecatedCount",
            message: "/note",
            source_component: "/deprecatedSource/component",
            source_host: "/deprecatedSource/host",
        },
        now,
    )
}

/// A port of kube-apiserver's `printEvent`.
fn event(f: EventFields<'_>, now: DateTime<Utc>) -> Vec<Value> {
    let obj = f.obj;
    let first = match timestamp(obj.at(f.first)) {
        Some(_) => since(obj.at(f.first), now),
        None => since(obj.get("eventTime"), now),
    };
    let mut last = match timestamp(obj.at(f.last)) {
        Some(_) => since(obj.at(f.last), now),
        None => first.clone(),
    };
    let mut count = int(obj, f.count);
    if obj.get("series").is_some_and(Value::is_object) {
        last = since(obj.at("/series/lastObservedTime"), now);
        count = int(obj, "/series/count");
    } else if count == 0 {
        // Singleton events have no count in the new API.
        count = 1;
    }
    let kind = text(obj, &format!("{}/kind", f.involved)).to_lowercase();
    let involved_name = text(obj, &format!("{}/name", f.involved));
    let target = if involved_name.is_empty() {
        kind
    } else {
        format!("{kind}/{involved_name}")
    };
    let component = non_empty(
        text(obj, f.source_component),
        text(obj, "/reportingController"),
    );
    let instance = non_empty(text(obj, f.source_host), text(obj, "/reportingInstance"));
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(text(obj, "/type")),
        json!(text(obj, "/reason")),
        json!(target),
        json!(text(obj, &format!("{}/fieldPath", f.involved))),
        json!(source),
        json!(text(obj, f.message).trim()),
        json!(first),
        json!(count),
        json!(name(obj)),
    ]
}

fn non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() {
        b
    } else {
        a
    }
}

const ENDPOINTSLICE: &[Column] = &[
    NAME,
    col(
        "AddressType",
        "addressType specifies the type of address carried by this EndpointSlice.",
    ),
    col(
        "Ports",
        "ports specifies the list of network ports exposed by each endpoint in this slice.",
    ),
    col(
        "Endpoints",
        "endpoints is a list of unique endpoints in this slice.",
    ),
    AGE,
];

fn endpointslice(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let ports: Vec<String> = array(obj, "/ports")
        .iter()
        .map(|p| match p.get("port").and_then(Value::as_i64) {
            Some(port) => port.to_string(),
            None => match p.get("name").and_then(Value::as_str) {
                Some(name) => name.to_string(),
                None => "*".to_string(),
            },
        })
        .collect();
    let addresses: Vec<String> = array(obj, "/endpoints")
        .iter()
        .flat_map(|e| array(e, "/addresses").iter())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    vec![
        json!(name(obj)),
        json!(text(obj, "/addressType")),
        json!(list_with_more(&ports, "<unset>")),
        json!(list_with_more(&addresses, "<unset>")),
        json!(age(obj, now)),
    ]
}

const LEASE: &[Column] = &[
    NAME,
    col(
        "Holder",
        "holderIdentity contains the identity of the holder of a current lease.",
    ),
    AGE,
];

fn lease(obj: &Value, now: DateTime<Utc>) -> Vec<Value> {
    vec![
        json!(name(obj)),
        json!(text(obj, "/spec/holderIdentity")),
        json!(age(obj, now)),
    ]
}
