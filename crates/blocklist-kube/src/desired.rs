//! What every Node should carry: the blocklist's node items as the bridge last learned
//! them (a full reconcile, then each feed event). Until the first reconcile has marked
//! every Node it knows nothing, and nothing is changed on its account: the bridge never
//! acts on what it cannot see, and the Nodes' watch does not race that reconcile for the
//! same Nodes (which would cost a 409 and a second patch each). The Nodes the watch saw
//! meanwhile are remembered with their `resourceVersion`, and those changed since the
//! reconcile's listing are put right once it is done ([`Desired::take_deferred`]).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Node;

use crate::marking::Block;

/// Node name → the `resourceVersion` it was seen at.
pub type Versions = HashMap<String, Option<String>>;

#[derive(Default)]
pub struct Desired {
    /// `None` until the first reconcile has marked every Node.
    blocks: Mutex<Option<HashMap<String, Block>>>,
    /// Nodes the watch saw before that: to put right after it.
    deferred: Mutex<Versions>,
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

    /// Whether a first listing was taken.
    pub fn known(&self) -> bool {
        self.blocks.lock().expect("not poisoned").is_some()
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

    /// [`Desired::of`] for `node` as the watch saw it; when nothing is known yet, the Node
    /// is remembered for [`Desired::take_deferred`].
    pub fn of_seen(&self, node: &Node) -> Known {
        let name = node.metadata.name.clone().unwrap_or_default();
        let known = self.of(&name);
        if let Known::Nothing = known {
            self.deferred
                .lock()
                .expect("not poisoned")
                .insert(name, node.metadata.resource_version.clone());
        }
        known
    }

    /// The Nodes the watch saw before the first reconcile was done, once.
    pub fn take_deferred(&self) -> Versions {
        std::mem::take(&mut *self.deferred.lock().expect("not poisoned"))
    }
}
