//! Client sessions of the state machine: a retried proposal applies once (docs/guarantees.md,
//! Writes).
//!
//! A follower forwards its own writes to the leader as proposals carrying `(session, seq)`:
//! the session is a random number the server draws when it starts, `seq` counts its proposals,
//! and `acked` says that the answers of every `seq <= acked` have arrived. When an answer is
//! lost (the leader died, the connection broke after the proposal was appended), the follower
//! sends the same proposal again, possibly to a new leader. Both copies may end up committed;
//! the state machine applies the first and answers the second with the remembered result.
//!
//! The table is part of the replicated state: it changes only in `decide`/`remember`, which
//! the state machine calls in log order with the entry's index, so every member holds the same
//! table, and snapshots carry it (record type 23, see `raft::snapshot`). Results are kept until
//! acknowledged; a session with no proposal for [`SESSION_EXPIRY`] log entries is dropped, so
//! sessions of servers that restarted (new session numbers) do not accumulate.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::kube::mutation::ApplyError;
use crate::kube::object::ObjectKey;
use crate::kube::store::stored_from_json;
use crate::raft::types::{Applied, Proposal};

/// Log entries without a proposal after which a session is forgotten.
pub const SESSION_EXPIRY: u64 = 200_000;
/// Results one session may leave unacknowledged; older ones are forgotten first. A proposer
/// has a handful in flight at most (its writes are few and sequential per object).
const MAX_REMEMBERED: usize = 1_024;
/// Expired sessions are looked for once per this many log entries.
const EXPIRY_SWEEP_EVERY: u64 = 1_000;

/// A result as remembered (and as snapshots carry it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Remembered {
    Applied {
        resource_version: u64,
        key: ObjectKey,
        json: String,
    },
    Rejected(ApplyError),
}

impl Remembered {
    fn of(result: &Result<Applied, ApplyError>) -> Remembered {
        match result {
            Ok(applied) => match &applied.object {
                Some(object) => Remembered::Applied {
                    resource_version: applied.resource_version,
                    key: object.key.clone(),
                    json: String::from_utf8_lossy(&object.json).into_owned(),
                },
                None => Remembered::Applied {
                    resource_version: applied.resource_version,
                    key: ObjectKey::new("", "", ""),
                    json: String::new(),
                },
            },
            Err(e) => Remembered::Rejected(e.clone()),
        }
    }

    fn result(&self) -> Result<Applied, ApplyError> {
        match self {
            Remembered::Applied {
                resource_version,
                key,
                json,
            } => {
                let object =
                    stored_from_json(key.clone(), json.as_bytes())
                        .ok()
                        .map(|mut object| {
                            object.resource_version = *resource_version;
                            std::sync::Arc::new(object)
                        });
                Ok(Applied {
                    resource_version: *resource_version,
                    object,
                })
            }
            Remembered::Rejected(e) => Err(e.clone()),
        }
    }
}

/// One proposer's state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Session {
    /// Log index of its latest proposal.
    last_index: u64,
    /// Every seq up to this one has been acknowledged by the proposer.
    acked: u64,
    /// Results not yet acknowledged, by seq.
    results: BTreeMap<u64, Remembered>,
}

/// What to do with a proposal.
#[derive(Debug)]
pub enum Decision {
    /// Apply it (and `remember` the result if it has a session).
    Apply,
    /// A copy already applied: answer with its result, apply nothing.
    Answer(Result<Applied, ApplyError>),
}

/// The sessions table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sessions {
    sessions: BTreeMap<u64, Session>,
}

impl Sessions {
    /// Decides about `proposal` at log index `index`, forgetting what its `acked` releases.
    pub fn decide(&mut self, index: u64, proposal: &Proposal) -> Decision {
        self.sweep(index);
        let (Some(session), Some(seq)) = (proposal.session, proposal.seq) else {
            return Decision::Apply;
        };
        let state = self.sessions.entry(session).or_default();
        state.last_index = index;
        if let Some(acked) = proposal.acked {
            if acked > state.acked {
                state.acked = acked;
                state.results = state.results.split_off(&(acked + 1));
            }
        }
        if let Some(result) = state.results.get(&seq) {
            return Decision::Answer(result.result());
        }
        if seq <= state.acked {
            // Its answer already arrived, so nobody waits for this late copy: apply nothing.
            let key = proposal.mutation.key().clone();
            return Decision::Answer(Err(ApplyError::Invalid {
                key,
                reason: format!("session {session} proposal {seq} was already answered"),
            }));
        }
        Decision::Apply
    }

    /// Remembers the result of a session's proposal that was applied.
    pub fn remember(&mut self, proposal: &Proposal, result: &Result<Applied, ApplyError>) {
        let (Some(session), Some(seq)) = (proposal.session, proposal.seq) else {
            return;
        };
        let state = self.sessions.entry(session).or_default();
        state.results.insert(seq, Remembered::of(result));
        while state.results.len() > MAX_REMEMBERED {
            state.results.pop_first();
        }
    }

    /// Drops sessions idle for [`SESSION_EXPIRY`] entries (checked every
    /// [`EXPIRY_SWEEP_EVERY`] entries, so the cost is spread thin).
    fn sweep(&mut self, index: u64) {
        if index % EXPIRY_SWEEP_EVERY != 0 {
            return;
        }
        self.sessions
            .retain(|_, s| index.saturating_sub(s.last_index) < SESSION_EXPIRY);
    }

    /// How many sessions are known (for tests and metrics).
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::mutation::Mutation;
    use crate::kube::object::StoredObject;
    use serde_json::json;

    fn proposal(session: u64, seq: u64, acked: Option<u64>) -> Proposal {
        Proposal {
            mutation: Mutation::Delete {
                key: ObjectKey::new("configmaps", "default", "a"),
                precondition: Default::default(),
            },
            session: Some(session),
            seq: Some(seq),
            acked,
            prepared: Default::default(),
        }
    }

    fn applied(rv: u64) -> Result<Applied, ApplyError> {
        let key = ObjectKey::new("configmaps", "default", "a");
        let value = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default", "resourceVersion": rv.to_string()}});
        let object: StoredObject =
            stored_from_json(key, value.to_string().as_bytes()).expect("valid object");
        Ok(Applied {
            resource_version: rv,
            object: Some(std::sync::Arc::new(object)),
        })
    }

    #[test]
    fn a_second_copy_gets_the_first_result() {
        let mut table = Sessions::default();
        let p = proposal(7, 1, None);
        assert!(matches!(table.decide(10, &p), Decision::Apply));
        table.remember(&p, &applied(42));
        match table.decide(11, &p) {
            Decision::Answer(Ok(a)) => {
                assert_eq!(a.resource_version, 42);
                let object = a.object.expect("object remembered");
                assert_eq!(object.key.name, "a");
            }
            other => panic!("expected the remembered result, got {other:?}"),
        }
        // Another session with the same seq is a different proposal.
        assert!(matches!(
            table.decide(12, &proposal(8, 1, None)),
            Decision::Apply
        ));
    }

    #[test]
    fn rejections_are_remembered_too() {
        let mut table = Sessions::default();
        let p = proposal(7, 1, None);
        assert!(matches!(table.decide(1, &p), Decision::Apply));
        let refused = Err(ApplyError::NotFound(ObjectKey::new(
            "configmaps",
            "default",
            "a",
        )));
        table.remember(&p, &refused);
        assert!(matches!(
            table.decide(2, &p),
            Decision::Answer(Err(ApplyError::NotFound(_)))
        ));
    }

    #[test]
    fn acknowledged_results_are_forgotten_and_late_copies_apply_nothing() {
        let mut table = Sessions::default();
        for seq in 1..=3 {
            let p = proposal(7, seq, None);
            assert!(matches!(table.decide(seq, &p), Decision::Apply));
            table.remember(&p, &applied(seq));
        }
        let p4 = proposal(7, 4, Some(2));
        assert!(matches!(table.decide(4, &p4), Decision::Apply));
        assert_eq!(
            table.sessions[&7].results.len(),
            1,
            "seq 3 is still unacknowledged"
        );
        assert!(matches!(
            table.decide(5, &proposal(7, 1, None)),
            Decision::Answer(Err(ApplyError::Invalid { .. }))
        ));
        assert!(matches!(
            table.decide(6, &proposal(7, 3, None)),
            Decision::Answer(Ok(_))
        ));
    }

    #[test]
    fn idle_sessions_expire_by_log_index() {
        let mut table = Sessions::default();
        let p = proposal(7, 1, None);
        let _ = table.decide(1, &p);
        table.remember(&p, &applied(1));
        let _ = table.decide(SESSION_EXPIRY / 2, &proposal(8, 1, None));
        assert_eq!(table.len(), 2);
        let _ = table.decide(SESSION_EXPIRY + EXPIRY_SWEEP_EVERY, &proposal(9, 1, None));
        assert_eq!(table.len(), 2, "session 7 expired, 8 and 9 remain");
        assert!(!table.sessions.contains_key(&7));
    }

    #[test]
    fn proposals_without_a_session_always_apply() {
        let mut table = Sessions::default();
        let p = Proposal::new(Mutation::Delete {
            key: ObjectKey::new("configmaps", "default", "a"),
            precondition: Default::default(),
        });
        assert!(matches!(table.decide(1, &p), Decision::Apply));
        table.remember(&p, &applied(1));
        assert!(matches!(table.decide(2, &p), Decision::Apply));
        assert!(table.is_empty());
    }

    #[test]
    fn the_table_round_trips_through_json() {
        let mut table = Sessions::default();
        let p = proposal(7, 1, None);
        let _ = table.decide(1, &p);
        table.remember(&p, &applied(5));
        let bytes = serde_json::to_vec(&table).expect("encode");
        let back: Sessions = serde_json::from_slice(&bytes).expect("decode");
        assert_eq!(back, table);
    }
}
