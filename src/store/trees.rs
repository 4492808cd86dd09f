//! The store's sled trees, in one table.
//!
//! The table below is the only list of them: the tree's number ([`TreeId`], stored in the
//! etcd store's write log), its name on disk (the field's name), and what it holds. The
//! store opens its trees from it ([`Trees::of`]), every transaction spans the trees it lists
//! ([`Trees::transaction`]), the stats walk it ([`TreeId::ALL`]) and the write log names
//! trees by it; a tree added to the table is added to all of them, and nothing else may
//! name a tree (`open_tree` is called here only).
//!
//! Byte layouts: [`super::keys`], [`super::codec`], and `docs/architecture.md`.

use serde::{Deserialize, Serialize};
use sled::transaction::{
    ConflictableTransactionResult, TransactionResult, Transactional, TransactionalTree,
};
use sled::{Db, Tree};

/// Declares the table: the [`TreeId`] enum, [`Trees`] (the open trees by name) and
/// [`TxTrees`] (one transaction's view of them), each with one entry per row, in row order.
macro_rules! trees {
    ($( $(#[doc = $doc:literal])* $id:ident = $number:literal => $name:ident, )+) => {
        /// A tree, by the number a [`super::writes::Write`] names it with. The numbers are
        /// stored (the etcd store's write log): never reuse one.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub(crate) enum TreeId {
            $( $(#[doc = $doc])* $id = $number, )+
        }

        /// How many trees the store has.
        pub(crate) const TREE_COUNT: usize = [$( TreeId::$id, )+].len();

        impl TreeId {
            /// Every tree, in the table's order (which is the numbers' order).
            pub const ALL: [TreeId; TREE_COUNT] = [$( TreeId::$id, )+];

            /// The tree's name: sled's, and the etcd store's folded keys'.
            pub const fn name(self) -> &'static str {
                match self {
                    $( TreeId::$id => stringify!($name), )+
                }
            }

            /// This tree among `trees`.
            pub fn of(self, trees: &Trees) -> &Tree {
                match self {
                    $( TreeId::$id => &trees.$name, )+
                }
            }
        }

        /// The open trees of a database, one field per tree, named as on disk.
        #[derive(Clone)]
        pub(crate) struct Trees {
            $( $(#[doc = $doc])* pub $name: Tree, )+
        }

        impl Trees {
            /// The trees of `db`, each created empty where it has none. A tree new in a
            /// layout without a migration of its own (`idempotency`) starts empty on an
            /// older data dir, and an older binary leaves it alone.
            pub(crate) fn of(db: &Db) -> sled::Result<Trees> {
                Ok(Trees {
                    $( $name: TreeId::$id.open(db)?, )+
                })
            }

            /// Every tree, in the table's order.
            fn all(&self) -> [&Tree; TREE_COUNT] {
                [$( &self.$name, )+]
            }
        }

        /// One transaction's view of every tree.
        pub(crate) struct TxTrees {
            $( pub $name: TransactionalTree, )+
        }

        impl TxTrees {
            /// The view sled hands a transaction over [`Trees::all`], by name.
            fn of(view: &[TransactionalTree]) -> TxTrees {
                let [$( $name, )+]: &[TransactionalTree; TREE_COUNT] =
                    view.try_into().expect("a view of every tree");
                TxTrees {
                    $( $name: $name.clone(), )+
                }
            }
        }
    };
}

trees! {
    /// Every blocked item, keyed by kind and id.
    Items = 0 => items,
    /// One empty-valued entry per item (and allowlist entry) with a finite end, keyed by
    /// big-endian end, so the sweeper reads only what is due.
    Expiry = 1 => expiry,
    /// Which node each registered task manager runs on.
    TmNode = 2 => tm_node,
    /// `tm_node`'s inverse index: "task managers on node n" is a prefix scan.
    NodeTms = 3 => node_tms,
    /// The change log, in chunks keyed by their first revision, big-endian.
    Events = 4 => events,
    /// The schema version, the revision, the counts, the watermark, the policy, the
    /// exposure.
    Meta = 5 => meta,
    /// The allowlist: ids and prefixes never blocked.
    Allowlist = 6 => allowlist,
    /// Each item's most recent reports (schema 7).
    Reports = 7 => reports,
    /// Past blocks, and each id's counter of them (schema 7).
    History = 8 => history,
    /// Past blocks by when they ended, for retention (schema 7).
    HistoryEnds = 9 => history_ends,
    /// `Idempotency-Key` records (`commit::idempotency`).
    Idempotency = 10 => idempotency,
    /// Enforcers' statuses of blocked items: every enforcer's of an item in one value
    /// under the item's key (`commit::enforcement`).
    Enforcement = 11 => enforcement,
    /// The live reports of the blocks several sources hold, or whose reports carry
    /// details, and each such block's roster of them (schema 10, `commit::live`).
    Live = 12 => live,
}

impl TreeId {
    /// Opens this tree of `db`, creating it empty where it has none.
    pub(crate) fn open(self, db: &Db) -> sled::Result<Tree> {
        db.open_tree(self.name())
    }
}

impl Trees {
    /// Runs `f` in one sled transaction over every tree (sled serialises transactions on
    /// one lock: spanning all of them costs nothing over spanning a few). `f` may be run
    /// again by sled: it must be free of side effects.
    pub(crate) fn transaction<A, E>(
        &self,
        f: impl Fn(&TxTrees) -> ConflictableTransactionResult<A, E>,
    ) -> TransactionResult<A, E> {
        let all = self.all();
        all[..].transaction(|view: &Vec<TransactionalTree>| f(&TxTrees::of(view)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numbers_are_the_table_order_and_the_names_are_distinct() {
        for (i, id) in TreeId::ALL.into_iter().enumerate() {
            assert_eq!(id as usize, i, "{id:?}");
        }
        let mut names: Vec<_> = TreeId::ALL.map(TreeId::name).to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TREE_COUNT);
    }

    #[test]
    fn a_database_gets_exactly_the_trees_of_the_table_each_where_its_id_points() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path()).open().unwrap();
        let trees = Trees::of(&db).unwrap();
        let mut opened: Vec<String> = db
            .tree_names()
            .into_iter()
            .map(|n| String::from_utf8(n.to_vec()).unwrap())
            .filter(|n| n != "__sled__default")
            .collect();
        opened.sort_unstable();
        let mut named: Vec<String> = TreeId::ALL.map(|id| id.name().to_owned()).to_vec();
        named.sort_unstable();
        assert_eq!(opened, named);
        for id in TreeId::ALL {
            assert_eq!(&*id.of(&trees).name(), id.name().as_bytes(), "{id:?}");
        }
        // A transaction's view names each tree as the handles do.
        trees
            .transaction(|tx| {
                tx.history_ends.insert(b"k", b"v")?;
                Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
            })
            .unwrap();
        assert!(trees.history_ends.contains_key(b"k").unwrap());
        assert!(trees.history.is_empty());
    }
}
