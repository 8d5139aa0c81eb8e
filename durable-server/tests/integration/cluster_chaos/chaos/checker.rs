//! The history checker: what a run of increments and reads over counters must satisfy.
//!
//! A counter starts at 0; `increment` adds one and returns the new value; `get` returns the
//! value. Every call of a run is recorded with when it started and ended and how it ended:
//! acknowledged (with the value it returned), failed with nothing applied (a retryable error),
//! or unknown (a timeout, a reset connection, `outcome_unknown`: it may have been applied).
//! After the run the final value of every counter is read. The history is correct when, per
//! counter:
//!
//! - acknowledged increments returned distinct values (none was applied twice, no two nodes
//!   served the counter from separate copies);
//! - the final value is at least the number of acknowledged increments and at least every
//!   value any call saw (no acknowledged write was lost), and at most the acknowledged
//!   increments plus the increments whose outcome is unknown (nothing was applied that nobody
//!   asked for, and nothing that failed with a retryable error);
//! - a call started after another call ended sees that call's value or a newer one: a read
//!   never returns less than a value acknowledged before it started, and an increment returns
//!   more than it (real-time order, as linearizability asks).

use std::collections::HashMap;
use std::fmt;
use std::time::Instant;

/// What a call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `increment`.
    Increment,
    /// `get`.
    Read,
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Acknowledged, with the value the counter had after it.
    Ok(u64),
    /// Refused with nothing applied.
    Failed,
    /// Maybe applied, maybe not.
    Unknown,
}

/// One call of a run: on which counter, what, when (the attempt that got the answer), how it
/// ended.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    /// The counter's index.
    pub counter: usize,
    /// Increment or read.
    pub kind: Kind,
    /// When the answered attempt was sent.
    pub start: Instant,
    /// When its answer arrived.
    pub end: Instant,
    /// The answer.
    pub outcome: Outcome,
    /// The node that answered (to explain a violation; the checker ignores it).
    pub node: Option<std::net::SocketAddr>,
}

/// A rule the history broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two acknowledged increments returned the same value.
    Duplicate { counter: usize, value: u64 },
    /// The final value is below what was acknowledged: a write was lost.
    Lost {
        counter: usize,
        final_value: u64,
        needed: u64,
    },
    /// The final value is above the acknowledged plus unknown increments: something was
    /// applied that failed, or applied twice.
    TooHigh {
        counter: usize,
        final_value: u64,
        most: u64,
    },
    /// A call returned a value older than one acknowledged before it started.
    Stale {
        counter: usize,
        kind: Kind,
        value: u64,
        earlier: u64,
    },
    /// An increment returned 0, or a counter has calls but no final value.
    Malformed { counter: usize, what: &'static str },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Duplicate { counter, value } => {
                write!(
                    f,
                    "counter {counter}: two acknowledged increments returned {value}"
                )
            }
            Self::Lost {
                counter,
                final_value,
                needed,
            } => write!(
                f,
                "counter {counter}: final value {final_value} < {needed} acknowledged (lost write)"
            ),
            Self::TooHigh {
                counter,
                final_value,
                most,
            } => write!(
                f,
                "counter {counter}: final value {final_value} > {most} acknowledged + unknown"
            ),
            Self::Stale {
                counter,
                kind,
                value,
                earlier,
            } => write!(
                f,
                "counter {counter}: {kind:?} returned {value} after {earlier} was acknowledged"
            ),
            Self::Malformed { counter, what } => write!(f, "counter {counter}: {what}"),
        }
    }
}

/// The counts of a checked history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Acknowledged increments.
    pub acknowledged: u64,
    /// Increments with an unknown outcome.
    pub unknown: u64,
    /// Increments that failed with nothing applied.
    pub failed: u64,
    /// Acknowledged reads.
    pub reads: u64,
    /// Sum of the final values.
    pub final_total: u64,
}

/// Checks `ops` against the final values (`finals[counter]`). Returns the counts, or every
/// violation found.
pub fn check(ops: &[Op], finals: &[u64]) -> Result<Summary, Vec<Violation>> {
    let mut violations = Vec::new();
    let mut summary = Summary::default();
    let mut by_counter: HashMap<usize, Vec<&Op>> = HashMap::new();
    for op in ops {
        by_counter.entry(op.counter).or_default().push(op);
    }
    for (&counter, ops) in &by_counter {
        let Some(&final_value) = finals.get(counter) else {
            violations.push(Violation::Malformed {
                counter,
                what: "no final value",
            });
            continue;
        };
        summary.final_total += final_value;
        check_counter(counter, ops, final_value, &mut summary, &mut violations);
    }
    for (counter, &final_value) in finals.iter().enumerate() {
        if !by_counter.contains_key(&counter) && final_value != 0 {
            violations.push(Violation::TooHigh {
                counter,
                final_value,
                most: 0,
            });
        }
    }
    if violations.is_empty() {
        Ok(summary)
    } else {
        Err(violations)
    }
}

fn check_counter(
    counter: usize,
    ops: &[&Op],
    final_value: u64,
    summary: &mut Summary,
    violations: &mut Vec<Violation>,
) {
    let (mut acknowledged, mut unknown, mut highest) = (0_u64, 0_u64, 0_u64);
    let mut seen = HashMap::new();
    for op in ops {
        match (op.kind, op.outcome) {
            (Kind::Increment, Outcome::Ok(0)) => {
                violations.push(Violation::Malformed {
                    counter,
                    what: "an increment returned 0",
                });
            }
            (Kind::Increment, Outcome::Ok(value)) => {
                acknowledged += 1;
                highest = highest.max(value);
                if seen.insert(value, ()).is_some() {
                    violations.push(Violation::Duplicate { counter, value });
                }
            }
            (Kind::Increment, Outcome::Unknown) => unknown += 1,
            (Kind::Increment, Outcome::Failed) => summary.failed += 1,
            (Kind::Read, Outcome::Ok(value)) => {
                summary.reads += 1;
                highest = highest.max(value);
            }
            (Kind::Read, _) => {}
        }
    }
    summary.acknowledged += acknowledged;
    summary.unknown += unknown;
    let needed = acknowledged.max(highest);
    if final_value < needed {
        violations.push(Violation::Lost {
            counter,
            final_value,
            needed,
        });
    }
    let most = acknowledged + unknown;
    if final_value > most {
        violations.push(Violation::TooHigh {
            counter,
            final_value,
            most,
        });
    }
    check_real_time(counter, ops, violations);
}

/// Every acknowledged call must see at least the highest value acknowledged before it
/// started (an increment: more than it).
fn check_real_time(counter: usize, ops: &[&Op], violations: &mut Vec<Violation>) {
    let mut done: Vec<(Instant, u64)> = ops
        .iter()
        .filter_map(|op| match op.outcome {
            Outcome::Ok(value) => Some((op.end, value)),
            _ => None,
        })
        .collect();
    done.sort_unstable();
    // The highest value acknowledged by each prefix of `done`.
    let mut prefix_max = Vec::with_capacity(done.len());
    let mut highest = 0;
    for &(_, value) in &done {
        highest = highest.max(value);
        prefix_max.push(highest);
    }
    for op in ops {
        let Outcome::Ok(value) = op.outcome else {
            continue;
        };
        let before = done.partition_point(|&(end, _)| end < op.start);
        let Some(&earlier) = before.checked_sub(1).and_then(|i| prefix_max.get(i)) else {
            continue;
        };
        let stale = match op.kind {
            Kind::Read => value < earlier,
            Kind::Increment => value <= earlier,
        };
        if stale {
            violations.push(Violation::Stale {
                counter,
                kind: op.kind,
                value,
                earlier,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Builds histories on a clock of milliseconds from a common origin.
    struct History {
        origin: Instant,
        ops: Vec<Op>,
    }

    impl History {
        fn new() -> Self {
            Self {
                origin: Instant::now(),
                ops: Vec::new(),
            }
        }

        fn at(&self, millis: u64) -> Instant {
            self.origin + Duration::from_millis(millis)
        }

        fn op(mut self, counter: usize, kind: Kind, span: (u64, u64), outcome: Outcome) -> Self {
            let (start, end) = (self.at(span.0), self.at(span.1));
            self.ops.push(Op {
                counter,
                kind,
                start,
                end,
                outcome,
                node: None,
            });
            self
        }

        fn inc(self, counter: usize, span: (u64, u64), outcome: Outcome) -> Self {
            self.op(counter, Kind::Increment, span, outcome)
        }

        fn read(self, counter: usize, span: (u64, u64), value: u64) -> Self {
            self.op(counter, Kind::Read, span, Outcome::Ok(value))
        }
    }

    fn good() -> History {
        History::new()
            .inc(0, (0, 10), Outcome::Ok(1))
            .inc(0, (5, 20), Outcome::Ok(2))
            .inc(0, (21, 30), Outcome::Unknown)
            .inc(0, (22, 31), Outcome::Failed)
            .read(0, (31, 32), 2)
            .inc(1, (0, 5), Outcome::Ok(1))
            .read(1, (6, 7), 1)
    }

    #[test]
    fn a_correct_history_passes_with_its_counts() {
        let summary = check(&good().ops, &[2, 1]).expect("correct");
        assert_eq!(summary.acknowledged, 3);
        assert_eq!(summary.unknown, 1);
        assert_eq!(summary.failed, 1);
        assert_eq!(summary.reads, 2);
        // The unknown increment may have been applied after all.
        assert!(check(&good().ops, &[3, 1]).is_ok());
    }

    #[test]
    fn concurrent_calls_may_complete_in_either_order() {
        // The second increment returned first but overlaps the first: no order is implied.
        let ops = History::new()
            .inc(0, (0, 20), Outcome::Ok(2))
            .inc(0, (1, 10), Outcome::Ok(1))
            .read(0, (5, 25), 1)
            .ops;
        assert!(check(&ops, &[2]).is_ok());
    }

    #[test]
    fn an_increment_applied_twice_is_caught() {
        let ops = good().inc(0, (40, 50), Outcome::Ok(2)).ops;
        let violations = check(&ops, &[3, 1]).expect_err("duplicate");
        assert!(violations.contains(&Violation::Duplicate {
            counter: 0,
            value: 2
        }));
    }

    #[test]
    fn a_lost_write_is_caught() {
        let violations = check(&good().ops, &[1, 1]).expect_err("lost");
        assert!(matches!(
            violations[0],
            Violation::Lost {
                counter: 0,
                final_value: 1,
                needed: 2
            }
        ));
        // A value seen by a read is a write that must have survived too.
        let ops = History::new()
            .inc(0, (0, 5), Outcome::Unknown)
            .read(0, (6, 7), 1)
            .ops;
        let violations = check(&ops, &[0]).expect_err("lost");
        assert!(matches!(violations[0], Violation::Lost { needed: 1, .. }));
    }

    #[test]
    fn a_failed_call_that_was_applied_is_caught() {
        // One unknown and one failed increment: at most one of them may show.
        let violations = check(&good().ops, &[4, 1]).expect_err("too high");
        assert!(violations.contains(&Violation::TooHigh {
            counter: 0,
            final_value: 4,
            most: 3
        }));
        // A counter nobody called must stay at 0.
        let violations = check(&good().ops, &[2, 1, 1]).expect_err("too high");
        assert!(violations.contains(&Violation::TooHigh {
            counter: 2,
            final_value: 1,
            most: 0
        }));
    }

    #[test]
    fn a_stale_read_is_caught() {
        // The read started after the increment that returned 2 ended.
        let ops = good().read(0, (40, 41), 1).ops;
        let violations = check(&ops, &[2, 1]).expect_err("stale read");
        assert_eq!(
            violations,
            vec![Violation::Stale {
                counter: 0,
                kind: Kind::Read,
                value: 1,
                earlier: 2
            }]
        );
        // A read after a read: the second may not go back either.
        let ops = History::new()
            .inc(0, (0, 50), Outcome::Unknown)
            .read(0, (10, 11), 1)
            .read(0, (12, 13), 0)
            .ops;
        assert!(check(&ops, &[1]).is_err());
    }

    #[test]
    fn an_increment_from_a_stale_copy_is_caught() {
        // Two copies of counter 1: the second increment started after 1 was acknowledged and
        // returned 1 again from an old state (also a duplicate).
        let ops = good().inc(1, (10, 12), Outcome::Ok(1)).ops;
        let violations = check(&ops, &[2, 2]).expect_err("stale increment");
        assert!(violations.contains(&Violation::Stale {
            counter: 1,
            kind: Kind::Increment,
            value: 1,
            earlier: 1
        }));
    }

    #[test]
    fn malformed_histories_are_refused() {
        let ops = History::new().inc(0, (0, 1), Outcome::Ok(0)).ops;
        assert!(check(&ops, &[0]).is_err());
        assert!(
            check(&good().ops, &[2]).is_err(),
            "counter 1 has no final value"
        );
    }
}
