//! What every Node should carry: the blocklist's node items as the bridge last learned
//! them (a full listing, then each feed event). Until the first listing it knows nothing,
//! and nothing is changed on its account: the bridge never acts on what it cannot see.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::marking::Block;

#[derive(Default)]
pub struct Desired {
    /// `None` until the first listing.
    blocks: Mutex<Option<HashMap<String, Block>>>,
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
}
