//! Concurrency limits: at most N upstream requests per model, and M in total.
//!
//! A slot is held for one attempt only, never across a backoff wait, so a call sleeping before
//! its retry does not starve the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub(crate) struct Limits {
    per_model_max: usize,
    per_model: Mutex<HashMap<String, Arc<Semaphore>>>,
    total: Arc<Semaphore>,
}

/// Held while an attempt is in flight.
#[derive(Debug)]
pub(crate) struct Slots {
    _model: Option<OwnedSemaphorePermit>,
    _total: Option<OwnedSemaphorePermit>,
}

impl Limits {
    pub fn new(per_model_max: usize, total_max: usize) -> Self {
        Self {
            per_model_max,
            per_model: Mutex::default(),
            total: Arc::new(Semaphore::new(total_max)),
        }
    }

    /// Waits for a slot of `model`, then for a global one. Always in this order, so two
    /// callers can never hold one each of what the other needs.
    pub async fn acquire(&self, model: &str) -> Slots {
        let model_semaphore = {
            let mut per_model = self
                .per_model
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            per_model
                .entry(model.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_model_max)))
                .clone()
        };
        // `acquire_owned` fails only on a closed semaphore, and these are never closed.
        let model_permit = model_semaphore.acquire_owned().await.ok();
        let total_permit = self.total.clone().acquire_owned().await.ok();
        Slots {
            _model: model_permit,
            _total: total_permit,
        }
    }
}
