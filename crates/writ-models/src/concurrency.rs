//! Concurrency limits: at most N upstream requests per model, and M in total.
//!
//! A slot is held for one attempt only, never across a backoff wait, so a call sleeping before
//! its retry does not starve the others.
//!
//! Urgent calls (a resumed batch's, [`writ_core::model::ChatRequest::urgent`]) go ahead of the
//! others: an ordinary call passes a gate (a FIFO mutex per semaphore) before it may queue on the
//! semaphore, and holds the gate only while it waits there, so at most one ordinary call is ever
//! queued on a semaphore; an urgent call queues on it directly, behind that one at most. Tokio's
//! semaphore is fair (FIFO), which is what makes the order hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub(crate) struct Limits {
    per_model_max: usize,
    per_model: Mutex<HashMap<String, Arc<Gated>>>,
    total: Arc<Gated>,
}

/// A semaphore and the gate ordinary callers pass before they queue on it.
#[derive(Debug)]
struct Gated {
    slots: Arc<Semaphore>,
    gate: tokio::sync::Mutex<()>,
}

impl Gated {
    fn new(n: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(n)),
            gate: tokio::sync::Mutex::new(()),
        }
    }

    async fn acquire(&self, urgent: bool) -> Option<OwnedSemaphorePermit> {
        // `acquire_owned` fails only on a closed semaphore, and these are never closed.
        if urgent {
            return self.slots.clone().acquire_owned().await.ok();
        }
        let _gate = self.gate.lock().await;
        self.slots.clone().acquire_owned().await.ok()
    }
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
            total: Arc::new(Gated::new(total_max)),
        }
    }

    /// Waits for a slot of `model`, then for a global one. Always in this order, so two
    /// callers can never hold one each of what the other needs. An `urgent` caller goes ahead of
    /// the ordinary ones waiting.
    pub async fn acquire(&self, model: &str, urgent: bool) -> Slots {
        let model_semaphore = {
            let mut per_model = self
                .per_model
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            per_model
                .entry(model.to_owned())
                .or_insert_with(|| Arc::new(Gated::new(self.per_model_max)))
                .clone()
        };
        let model_permit = model_semaphore.acquire(urgent).await;
        let total_permit = self.total.acquire(urgent).await;
        Slots {
            _model: model_permit,
            _total: total_permit,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Starts a caller that takes a slot of `m`, reports `name` once it has it, and gives the
    /// slot back a moment later.
    fn waiter(
        limits: &Arc<Limits>,
        name: &'static str,
        urgent: bool,
        order: &Arc<Mutex<Vec<&'static str>>>,
    ) -> tokio::task::JoinHandle<()> {
        let (limits, order) = (limits.clone(), order.clone());
        tokio::spawn(async move {
            let _slots = limits.acquire("m", urgent).await;
            order.lock().unwrap().push(name);
            tokio::time::sleep(Duration::from_millis(1)).await;
        })
    }

    #[tokio::test(start_paused = true)]
    async fn an_urgent_call_goes_ahead_of_the_ordinary_ones_waiting_but_not_of_a_held_slot() {
        let limits = Arc::new(Limits::new(1, 10));
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = limits.acquire("m", false).await;
        let mut waiting = Vec::new();
        for (name, urgent) in [("first", false), ("second", false), ("third", false)] {
            waiting.push(waiter(&limits, name, urgent, &order));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        waiting.push(waiter(&limits, "urgent", true, &order));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(order.lock().unwrap().is_empty(), "the slot is held");
        drop(held);
        for w in waiting {
            w.await.unwrap();
        }
        // Behind the one ordinary call already queued on the slot, ahead of the rest.
        assert_eq!(
            *order.lock().unwrap(),
            ["first", "urgent", "second", "third"]
        );
    }
}
