//! What is built once per workspace, kept by name until the workspace is deleted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use writ_core::Workspace;

/// What is built once per workspace (the router of the routes inside it), by name, with the
/// opened workspace it was built over: a workspace deleted and made again is built afresh. A
/// lookup is one short lock and a hash probe, whatever the number of workspaces.
pub struct BuiltPer<T>(Mutex<HashMap<String, Built<T>>>);

/// A value, and the opened workspace it was built over.
type Built<T> = (Arc<dyn Workspace>, T);

impl<T> Default for BuiltPer<T> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<T: Clone> BuiltPer<T> {
    pub fn get(&self, name: &str, workspace: &Arc<dyn Workspace>) -> Option<T> {
        let built = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        built
            .get(name)
            .filter(|(over, _)| Arc::ptr_eq(over, workspace))
            .map(|(_, value)| value.clone())
    }

    pub fn insert(&self, name: &str, workspace: Arc<dyn Workspace>, value: T) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), (workspace, value));
    }

    pub fn forget(&self, name: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// A cache by workspace name that [`Workspaces`] empties of a workspace it deletes.
pub trait PerWorkspaceCache: Send + Sync {
    fn forget(&self, name: &str);
}

impl<T: Clone + Send> PerWorkspaceCache for BuiltPer<T> {
    fn forget(&self, name: &str) {
        BuiltPer::forget(self, name);
    }
}
