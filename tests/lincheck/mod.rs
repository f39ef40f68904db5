//! A linearizability checker for one register (one object): the Wing–Gong search with Lowe's
//! memoization of (set of linearized operations, register value), as in Knossos and
//! Porcupine. Keys are independent, so a multi-key history is checked one key at a time.
//!
//! Operations whose fate is unknown (timeouts, 504, lost connections) are indeterminate: they
//! never complete, so their effect may be placed anywhere after their invocation — or never,
//! which is the same as placing it after every other operation.
#![allow(dead_code)]

use std::collections::HashMap;

/// A register value: the token a write stored (unique per write); 0 is "absent".
pub type Value = u64;

/// What an operation asked for (and, for a read, what it saw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// A read that returned this value.
    Read(Value),
    /// An unconditional write.
    Write(Value),
    /// Write `new` only if the register holds `expect`.
    Cas { expect: Value, new: Value },
}

/// How an operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It took effect (a read: it returned its value).
    Ok,
    /// A compare-and-swap that found another value (409 Conflict): no effect.
    CasFailed,
    /// Unknown: it may or may not have taken effect (indeterminate).
    Unknown,
}

/// One operation of a history; times are monotonic nanoseconds.
#[derive(Clone, Debug)]
pub struct Op {
    pub client: usize,
    pub call: Call,
    pub outcome: Outcome,
    pub invoke: u64,
    /// `None` for indeterminate operations.
    pub complete: Option<u64>,
}

impl Op {
    fn determinate(&self) -> bool {
        self.complete.is_some()
    }
}

/// Why a history is not linearizable.
#[derive(Debug)]
pub struct Anomaly {
    /// Most determinate operations the search managed to linearize.
    pub best_prefix: usize,
    pub determinate: usize,
    /// The operation whose completion blocked the deepest attempt.
    pub blocked_at: Option<Op>,
}

/// The register's transition for `op` from `state`, or `None` if `op` cannot happen there.
fn step(state: Value, op: &Op) -> Option<Value> {
    match (op.call, op.outcome) {
        (Call::Read(v), _) => (v == state).then_some(state),
        (Call::Write(v), _) => Some(v),
        (Call::Cas { expect, .. }, Outcome::CasFailed) => (state != expect).then_some(state),
        (Call::Cas { expect, new }, _) => (state == expect).then_some(new),
    }
}

const NONE: usize = usize::MAX;

/// One call or return event in the doubly linked list the search walks.
#[derive(Clone, Copy)]
struct Node {
    op: usize,
    is_call: bool,
    /// For a call: its return node (NONE when indeterminate).
    partner: usize,
    prev: usize,
    next: usize,
}

struct Events {
    nodes: Vec<Node>,
}

impl Events {
    /// Node 0 is the head sentinel; events follow in time order, calls before returns at
    /// equal times (treating touching operations as concurrent: never a false anomaly).
    fn new(ops: &[Op]) -> Events {
        let mut order: Vec<(u64, u8, usize)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            order.push((op.invoke, 0, i));
            if let Some(t) = op.complete {
                order.push((t, 1, i));
            }
        }
        order.sort();
        let mut nodes = vec![Node {
            op: NONE,
            is_call: false,
            partner: NONE,
            prev: NONE,
            next: NONE,
        }];
        let mut call_node = vec![NONE; ops.len()];
        for (k, &(_, kind, i)) in order.iter().enumerate() {
            let at = k + 1;
            nodes.push(Node {
                op: i,
                is_call: kind == 0,
                partner: NONE,
                prev: at - 1,
                next: if k + 1 < order.len() { at + 1 } else { NONE },
            });
            if kind == 0 {
                call_node[i] = at;
            } else {
                nodes[call_node[i]].partner = at;
            }
        }
        nodes[0].next = if order.is_empty() { NONE } else { 1 };
        Events { nodes }
    }

    fn unlink(&mut self, n: usize) {
        let Node { prev, next, .. } = self.nodes[n];
        self.nodes[prev].next = next;
        if next != NONE {
            self.nodes[next].prev = prev;
        }
    }

    fn relink(&mut self, n: usize) {
        let Node { prev, next, .. } = self.nodes[n];
        self.nodes[prev].next = n;
        if next != NONE {
            self.nodes[next].prev = n;
        }
    }

    /// Takes a call (and its return) out of the list.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        let partner = self.nodes[call].partner;
        if partner != NONE {
            self.unlink(partner);
        }
    }

    /// Undoes the matching `lift` (lifts are undone in reverse order).
    fn unlift(&mut self, call: usize) {
        let partner = self.nodes[call].partner;
        if partner != NONE {
            self.relink(partner);
        }
        self.relink(call);
    }
}

/// The configurations already explored: for each (determinate operations linearized,
/// register value), the sets of indeterminate operations linearized with them. A
/// configuration is dominated by one with the same determinate set and value and fewer
/// indeterminate operations used up: an indeterminate operation need never be linearized, so
/// the smaller set can do everything the larger one can (Lowe's memoization, extended to
/// keep histories with many timed-out operations small).
#[derive(Default)]
struct Seen {
    map: HashMap<(Vec<u64>, Value), Vec<Vec<u64>>>,
}

impl Seen {
    /// Records the configuration; false if an explored one dominates it.
    fn insert(&mut self, det: &[u64], indet: &[u64], value: Value) -> bool {
        let sets = self.map.entry((det.to_vec(), value)).or_default();
        let dominated = sets
            .iter()
            .any(|seen| seen.iter().zip(indet).all(|(s, c)| s & !c == 0));
        if !dominated {
            sets.push(indet.to_vec());
        }
        !dominated
    }
}

/// Checks that `ops` on a register starting at `initial` are linearizable.
pub fn check(initial: Value, ops: &[Op]) -> Result<(), Anomaly> {
    // A read whose fate is unknown says nothing and changes nothing.
    let ops: Vec<Op> = ops
        .iter()
        .filter(|o| o.determinate() || !matches!(o.call, Call::Read(_)))
        .cloned()
        .collect();
    let determinate = ops.iter().filter(|o| o.determinate()).count();
    let mut events = Events::new(&ops);
    let words = ops.len().div_ceil(64).max(1);
    // Linearized operations, determinate and indeterminate ones apart.
    let mut det = vec![0u64; words];
    let mut indet = vec![0u64; words];
    let mut seen = Seen::default();
    let mut stack: Vec<(usize, Value)> = Vec::new();
    let mut state = initial;
    let mut left = determinate;
    let mut best = (0usize, None::<Op>);
    let mut entry = events.nodes[0].next;
    loop {
        if left == 0 {
            return Ok(());
        }
        if entry != NONE && events.nodes[entry].is_call {
            let i = events.nodes[entry].op;
            if let Some(next) = step(state, &ops[i]) {
                let bits = if ops[i].determinate() {
                    &mut det
                } else {
                    &mut indet
                };
                bits[i / 64] |= 1 << (i % 64);
                if seen.insert(&det, &indet, next) {
                    stack.push((entry, state));
                    state = next;
                    if ops[i].determinate() {
                        left -= 1;
                    }
                    events.lift(entry);
                    entry = events.nodes[0].next;
                    continue;
                }
                let bits = if ops[i].determinate() {
                    &mut det
                } else {
                    &mut indet
                };
                bits[i / 64] &= !(1 << (i % 64));
            }
            entry = events.nodes[entry].next;
            continue;
        }
        // A return (or the end): the operation it completes cannot be linearized after what
        // is on the stack, so undo the latest choice.
        let done = determinate - left;
        if done >= best.0 && entry != NONE {
            best = (done, Some(ops[events.nodes[entry].op].clone()));
        }
        let Some((call, old)) = stack.pop() else {
            return Err(Anomaly {
                best_prefix: best.0,
                determinate,
                blocked_at: best.1,
            });
        };
        let i = events.nodes[call].op;
        if ops[i].determinate() {
            det[i / 64] &= !(1 << (i % 64));
            left += 1;
        } else {
            indet[i / 64] &= !(1 << (i % 64));
        }
        state = old;
        events.unlift(call);
        entry = events.nodes[call].next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(call: Call, outcome: Outcome, invoke: u64, complete: Option<u64>) -> Op {
        Op {
            client: 0,
            call,
            outcome,
            invoke,
            complete,
        }
    }

    #[test]
    fn stale_read_after_a_completed_write_is_rejected() {
        let history = [
            op(Call::Write(2), Outcome::Ok, 0, Some(10)),
            op(Call::Read(1), Outcome::Ok, 20, Some(30)),
        ];
        let anomaly = check(1, &history).expect_err("stale read accepted");
        assert_eq!(anomaly.best_prefix, 1);
        assert_eq!(anomaly.blocked_at.map(|o| o.call), Some(Call::Read(1)));
    }

    #[test]
    fn concurrent_reads_may_see_either_value() {
        let history = [
            op(Call::Write(2), Outcome::Ok, 0, Some(10)),
            op(Call::Read(1), Outcome::Ok, 5, Some(15)),
            op(Call::Read(2), Outcome::Ok, 6, Some(8)),
            op(Call::Read(2), Outcome::Ok, 20, Some(30)),
            op(Call::Cas { expect: 2, new: 3 }, Outcome::Ok, 31, Some(40)),
            op(
                Call::Cas { expect: 2, new: 4 },
                Outcome::CasFailed,
                35,
                Some(45),
            ),
            op(Call::Read(3), Outcome::Ok, 50, Some(60)),
        ];
        check(1, &history).expect("linearizable history rejected");
    }

    #[test]
    fn a_read_may_not_go_back_after_seeing_a_new_value() {
        // Both reads overlap the write, but once one saw 2 a later one cannot see 1.
        let history = [
            op(Call::Write(2), Outcome::Ok, 0, Some(100)),
            op(Call::Read(2), Outcome::Ok, 10, Some(20)),
            op(Call::Read(1), Outcome::Ok, 30, Some(40)),
        ];
        assert!(check(1, &history).is_err());
    }

    #[test]
    fn indeterminate_writes_may_apply_late_or_never() {
        let late = [
            op(Call::Write(2), Outcome::Unknown, 0, None),
            op(Call::Read(1), Outcome::Ok, 10, Some(20)),
            op(Call::Read(2), Outcome::Ok, 500, Some(510)),
        ];
        check(1, &late).expect("a late effect of a timed-out write rejected");
        let never = [
            op(Call::Write(2), Outcome::Unknown, 0, None),
            op(Call::Read(1), Outcome::Ok, 500, Some(510)),
        ];
        check(1, &never).expect("a timed-out write without effect rejected");
        // But it applies at most once: the value cannot come back after being overwritten.
        let twice = [
            op(Call::Write(2), Outcome::Unknown, 0, None),
            op(Call::Read(2), Outcome::Ok, 10, Some(20)),
            op(Call::Write(3), Outcome::Ok, 30, Some(40)),
            op(Call::Read(2), Outcome::Ok, 50, Some(60)),
        ];
        assert!(check(1, &twice).is_err());
    }

    #[test]
    fn cas_conflicts_must_be_justified() {
        // The second CAS expected the current value and still reported a conflict.
        let history = [
            op(
                Call::Cas { expect: 1, new: 2 },
                Outcome::CasFailed,
                0,
                Some(10),
            ),
            op(Call::Read(1), Outcome::Ok, 20, Some(30)),
        ];
        assert!(check(1, &history).is_err());
        // Two successful CAS from the same expected value: one of them lied.
        let both = [
            op(Call::Cas { expect: 1, new: 2 }, Outcome::Ok, 0, Some(10)),
            op(Call::Cas { expect: 1, new: 3 }, Outcome::Ok, 5, Some(15)),
        ];
        assert!(check(1, &both).is_err());
    }

    #[test]
    fn a_value_nobody_wrote_is_rejected() {
        let history = [op(Call::Read(9), Outcome::Ok, 0, Some(10))];
        assert!(check(1, &history).is_err());
    }

    #[test]
    fn long_concurrent_histories_stay_fast() {
        // 300 operations, 6 clients, overlapping windows, some indeterminate writes.
        let mut history = Vec::new();
        let mut value = 1;
        for k in 0..300u64 {
            let t = k * 10;
            let o = match k % 5 {
                0 | 1 => op(Call::Read(value), Outcome::Ok, t, Some(t + 25)),
                2 => {
                    value = k + 100;
                    op(Call::Write(value), Outcome::Ok, t, Some(t + 8))
                }
                3 => op(Call::Write(k + 10_000), Outcome::Unknown, t, None),
                _ => op(
                    Call::Cas {
                        expect: value,
                        new: k + 100,
                    },
                    Outcome::CasFailed,
                    t,
                    Some(t + 30),
                ),
            };
            if k % 5 == 4 {
                // The CAS above "expected" the current value: make it a success instead.
                value = k + 100;
                history.push(Op {
                    outcome: Outcome::Ok,
                    complete: Some(t + 6),
                    ..o
                });
            } else {
                history.push(o);
            }
        }
        check(1, &history).expect("linearizable synthetic history rejected");
    }
}
