//! The order of a shared database, as plain logic: which ids a batch gets
//! under the service's lock, and what a node must fetch before it applies
//! its own batch. No database here: `mailjar_write` (schema 5, see
//! `write.rs`) numbers a batch in SQL as [`assign`] does, the tests below
//! check [`assign`] against a model, and a test on a real PostgreSQL checks
//! that the SQL numbers as [`assign`] and [`after`] do.
//!
//! Every write transaction takes one advisory lock first and holds it to
//! its commit, and PostgreSQL makes a commit visible before it lets go of
//! the transaction's locks: commits are serialised. Under the lock a batch
//! reads the service's head (the greatest id ever committed) and numbers
//! its messages after it, so id order is commit order, and a reader that
//! sees id X already sees every committed id below X.

use mailjar_core::id::{IdGenerator, MessageId};

/// The id right after `id` (the next of its millisecond's sequence).
pub fn after(id: MessageId) -> MessageId {
    let mut ids = IdGenerator::new();
    ids.resume_after(id);
    ids.next(0, [0; 10])
}

/// The ids a batch commits under, given the head read under the lock: each
/// keeps the id the node proposed when it sorts after the one before it
/// (the head first), else takes the next id after that one.
pub fn assign(head: Option<MessageId>, proposed: &[MessageId]) -> Vec<MessageId> {
    let mut previous = head;
    proposed
        .iter()
        .map(|&id| {
            let id = match previous {
                Some(p) if id <= p => after(p),
                _ => id,
            };
            previous = Some(id);
            id
        })
        .collect()
}

/// What a node must fetch from the database before it hands its own,
/// just committed batch to its core: the messages other nodes committed
/// after the last one it applied, up to the head its batch read (None: it
/// is caught up and inserts its batch at once).
pub fn gap(
    applied: Option<MessageId>,
    head: Option<MessageId>,
) -> Option<(Option<MessageId>, MessageId)> {
    match (applied, head) {
        (_, None) => None,
        (Some(a), Some(h)) if a >= h => None,
        (a, Some(h)) => Some((a, h)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One step of the interleaving: a node proposes a message (its clock
    /// may lag), a node commits what it proposed, or a node catches up.
    #[derive(Debug, Clone)]
    enum Step {
        Propose { node: usize, clock: u64 },
        Commit { node: usize },
        CatchUp { node: usize, limit: usize },
    }

    fn step(nodes: usize) -> impl Strategy<Value = Step> {
        prop_oneof![
            (0..nodes, 0u64..50).prop_map(|(node, clock)| Step::Propose { node, clock }),
            (0..nodes).prop_map(|node| Step::Commit { node }),
            (0..nodes, 1usize..4).prop_map(|(node, limit)| Step::CatchUp { node, limit }),
        ]
    }

    /// A node: its id generator, what it proposed, and what its core holds in the order applied.
    #[derive(Default)]
    struct Node {
        ids: IdGenerator,
        proposed: Vec<MessageId>,
        core: Vec<MessageId>,
    }

    impl Node {
        fn applied(&self) -> Option<MessageId> {
            self.core.last().copied()
        }

        /// Fetches up to `limit` committed ids after the applied one, up to `upto`.
        fn fetch(&mut self, db: &[MessageId], upto: Option<MessageId>, limit: usize) {
            let applied = self.applied();
            let rows = db
                .iter()
                .filter(|&&id| applied.is_none_or(|a| id > a) && upto.is_none_or(|u| id <= u))
                .take(limit)
                .copied()
                .collect::<Vec<_>>();
            self.core.extend(rows);
        }
    }

    proptest! {
        #[test]
        fn every_node_applies_every_commit_once_in_commit_order(
            steps in proptest::collection::vec(step(3), 1..120)
        ) {
            let mut nodes: Vec<Node> = (0..3).map(|_| Node::default()).collect();
            // The database: ids in commit order.
            let mut db: Vec<MessageId> = Vec::new();
            for s in steps {
                match s {
                    Step::Propose { node, clock } => {
                        let id = nodes[node].ids.next(1_000 + clock, [node as u8; 10]);
                        nodes[node].proposed.push(id);
                    }
                    Step::Commit { node } => {
                        let n = &mut nodes[node];
                        let proposed = std::mem::take(&mut n.proposed);
                        let head = db.last().copied();
                        let ids = assign(head, &proposed);
                        db.extend(&ids);
                        // The gap first (all at once), then its own batch.
                        if let Some((_, upto)) = gap(n.applied(), head) {
                            n.fetch(&db, Some(upto), usize::MAX);
                        }
                        n.core.extend(&ids);
                        if let Some(&last) = ids.last() {
                            n.ids.resume_after(last);
                        }
                    }
                    Step::CatchUp { node, limit } => nodes[node].fetch(&db, None, limit),
                }
                // Commit order is id order.
                prop_assert!(db.windows(2).all(|w| w[0] < w[1]));
                for n in &nodes {
                    // Each core is a prefix of the database: no gap, no duplicate, in order.
                    prop_assert_eq!(&db[..n.core.len()], &n.core[..]);
                }
            }
            for n in &mut nodes {
                n.fetch(&db, None, usize::MAX);
                prop_assert_eq!(&n.core, &db);
            }
        }
    }

    #[test]
    fn a_batch_behind_the_head_is_numbered_after_it() {
        let mut ids = IdGenerator::new();
        let early = ids.next(1_000, [1; 10]);
        let late = ids.next(5_000, [1; 10]);
        let head = Some(late);
        let assigned = assign(head, &[early, late]);
        assert!(assigned[0] > late && assigned[1] > assigned[0]);
        assert_eq!(assign(None, &[early, late]), [early, late]);
        assert_eq!(gap(Some(late), head), None);
        assert_eq!(gap(Some(early), head), Some((Some(early), late)));
        assert_eq!(gap(None, None), None);
    }
}
