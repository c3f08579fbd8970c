//! The private networks this replica has read: a network's identifier and
//! range never change once made, and every fetch of every busy node asks
//! for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gantry_entities::private_network;
use uuid::Uuid;

/// Networks already read, by scope and region and by id: a network's
/// identifier and range never change once made, and every fetch of every
/// busy node asks for them.
#[derive(Default)]
pub struct Cache(Mutex<Kept>);

#[derive(Default)]
struct Kept {
    by_scope: HashMap<(Uuid, Uuid), Arc<private_network::Model>>,
    by_id: HashMap<Uuid, Arc<private_network::Model>>,
}

impl Cache {
    pub fn by_scope(&self, scope: Uuid, region: Uuid) -> Option<Arc<private_network::Model>> {
        self.0.lock().ok()?.by_scope.get(&(scope, region)).cloned()
    }

    pub fn by_id(&self, id: Uuid) -> Option<Arc<private_network::Model>> {
        self.0.lock().ok()?.by_id.get(&id).cloned()
    }

    pub fn keep(&self, network: private_network::Model) -> Arc<private_network::Model> {
        let network = Arc::new(network);
        if let Ok(mut kept) = self.0.lock() {
            kept.by_scope
                .insert((network.scope_id, network.region_id), Arc::clone(&network));
            kept.by_id.insert(network.id, Arc::clone(&network));
        }
        network
    }
}
