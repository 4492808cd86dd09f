//! What every Node should carry: the blocklist's node items as the bridge last learned
//! them (a full reconcile's listing, then each feed event, applied also while that
//! reconcile marks the Nodes). Before the first listing it knows nothing, and nothing is
//! changed on its account: the bridge never acts on what it cannot see. Until the first
//! reconcile has marked every Node, the Nodes' watch does not race it for the same Nodes
//! (which would cost a 409 and a second patch each): the Nodes it saw meanwhile are
//! remembered with their `resourceVersion`, and those changed since the reconcile's
//! listing are put right once it is done ([`Desired::take_deferred`]).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Node;

use crate::marking::Block;

/// Node name → the `resourceVersion` it was seen at.
pub type Versions = HashMap<String, Option<String>>;

pub struct Desired {
    /// `None` until the first listing.
    blocks: Mutex<Option<HashMap<String, Block>>>,
    /// Nodes the watch saw before the first reconcile marked every Node: to put right
    /// after it; `None` once it did (the watch acts on what it sees).
    deferred: Mutex<Option<Versions>>,
}

impl Default for Desired {
    fn default() -> Desired {
        Desired {
            blocks: Mutex::new(None),
            deferred: Mutex::new(Some(Versions::new())),
        }
    }
}

/// What the bridge knows of a Node's block.
pub enum Known {
    /// No listing yet: leave the Node alone.
    Nothing,
    /// Its block, or `None`: not blocked.
    Block(Option<Block>),
}

impl Desired {
    /// Every node item, from a full listing.
    pub fn replace(&self, all: HashMap<String, Block>) {
        *self.blocks.lock().expect("not poisoned") = Some(all);
    }

    /// Node `id`'s item after a feed event (`None`: unblocked).
    pub fn set(&self, id: &str, block: Option<Block>) {
        if let Some(blocks) = self.blocks.lock().expect("not poisoned").as_mut() {
            match block {
                Some(block) => blocks.insert(id.to_owned(), block),
                None => blocks.remove(id),
            };
        }
    }

    /// What Node `id` should carry, as far as the bridge knows.
    pub fn of(&self, id: &str) -> Known {
        match self.blocks.lock().expect("not poisoned").as_ref() {
            None => Known::Nothing,
            Some(blocks) => Known::Block(blocks.get(id).cloned()),
        }
    }

    /// The blocked nodes whose action asks for evacuation, oldest change first; `None`
    /// before the first reconcile.
    pub fn evacuating(&self) -> Option<Vec<Block>> {
        let blocks = self.blocks.lock().expect("not poisoned");
        let mut evacuating: Vec<Block> = blocks
            .as_ref()?
            .values()
            .filter(|b| b.evacuates())
            .cloned()
            .collect();
        drop(blocks);
        evacuating.sort_by(|a, b| (a.revision, &a.id).cmp(&(b.revision, &b.id)));
        Some(evacuating)
    }

    /// [`Desired::of`] for `node` as the watch saw it; before the first reconcile marked
    /// every Node, [`Known::Nothing`], and the Node is remembered for
    /// [`Desired::take_deferred`].
    pub fn of_seen(&self, node: &Node) -> Known {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(deferred) = self.deferred.lock().expect("not poisoned").as_mut() {
            deferred.insert(name, node.metadata.resource_version.clone());
            return Known::Nothing;
        }
        self.of(&name)
    }

    /// The Nodes the watch saw before the first reconcile was done, once: from now on
    /// the watch acts on what it sees.
    pub fn take_deferred(&self) -> Versions {
        self.deferred
            .lock()
            .expect("not poisoned")
            .take()
            .unwrap_or_default()
    }
}
