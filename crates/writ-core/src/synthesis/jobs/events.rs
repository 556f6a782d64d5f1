//! A job's progress events: numbered as the batch emits them, queued, and stored in bursts by one
//! writer per process, so progress never holds up an answer.

use super::*;

/// Numbers a job's events in the order the batch emits them and queues them for the writer.
pub(super) struct ChannelSink {
    pub(super) job_id: Uuid,
    pub(super) seq: AtomicI64,
    pub(super) tx: EventQueue,
}

impl ProgressSink for ChannelSink {
    fn emit(&self, event: Event) {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        self.tx.send(JobEvent {
            job_id: self.job_id,
            seq,
            created_at: Utc::now(),
            name: event.name().to_string(),
            data: serde_json::to_value(&event).unwrap_or(serde_json::Value::Null),
        });
    }
}

/// Most events written in one statement: five values each, well under the bound parameters
/// either backend takes in one statement (SQLite's 32,766), so a backlog under load drains in
/// a few large inserts instead of growing.
pub(super) const EVENTS_PER_WRITE: usize = 2048;

/// How long the event writer waits, once an event has arrived, for the rest of its burst. A
/// batch emits its events in bursts (its files start their calls within a millisecond or two,
/// their answers arrive together, its files are written together), but spread enough that a
/// writer taking whatever was queued wrote a statement for every two or three events at low
/// rates: nine statements for a five-file batch's 52 events, each a transaction on the database.
/// Waiting this long merges a burst into one; live progress is this much later at most, which
/// no one following a model call can see. A `done` event ends the wait (not the burst).
pub(super) const EVENT_LINGER: Duration = Duration::from_millis(5);

/// Stores every job's events, in bursts: what arrives within [`EVENT_LINGER`] of a burst's
/// first event, and whatever arrived while the last write ran, goes out in one statement, so
/// the events of many batches cost a few commits, and no batch's answer waits for its progress
/// to be stored.
pub(super) async fn write_events(
    store: Arc<dyn SynthesisStore>,
    hub: EventHub,
    mut rx: mpsc::UnboundedReceiver<JobEvent>,
    progress: Arc<EventProgress>,
) {
    let mut burst: Vec<JobEvent> = Vec::new();
    while next_burst(&mut rx, &mut burst, EVENT_LINGER).await {
        let mut jobs: Vec<Uuid> = burst.iter().map(|e| e.job_id).collect();
        jobs.sort_unstable();
        jobs.dedup();
        if let Err(e) = store.append_job_events(&burst).await {
            // Progress is best effort; the batch and its audit trail do not depend on it. One
            // job's refused events (a stale-job sweep got in first) must not cost the others.
            if jobs.len() == 1 {
                tracing::warn!(events = burst.len(), error = %e, "could not store progress events");
            } else {
                for job in &jobs {
                    let own: Vec<JobEvent> =
                        burst.iter().filter(|e| e.job_id == *job).cloned().collect();
                    if let Err(e) = store.append_job_events(&own).await {
                        tracing::warn!(job = %job, events = own.len(), error = %e, "could not store progress events");
                    }
                }
            }
        }
        progress
            .stored
            .fetch_add(burst.len() as u64, Ordering::SeqCst);
        progress.stored_more.notify_waiters();
        burst.clear();
        for job in jobs {
            hub.notify(job);
        }
    }
}

/// Waits for an event, then gathers into `burst` every event already queued and those that
/// arrive within `linger` of the first, up to [`EVENTS_PER_WRITE`]. Once a `done` event is among
/// them the gathering stops waiting but still takes what is queued: under load the queue holds
/// many jobs' `done`s, and stopping at the first would cut the bursts small enough for the
/// writer to fall behind. False when the channel is closed and nothing is left to write.
pub(super) async fn next_burst(
    rx: &mut mpsc::UnboundedReceiver<JobEvent>,
    burst: &mut Vec<JobEvent>,
    linger: Duration,
) -> bool {
    let Some(first) = rx.recv().await else {
        return false;
    };
    let until = tokio::time::Instant::now() + linger;
    let mut waiting = first.name != DONE;
    burst.push(first);
    while burst.len() < EVENTS_PER_WRITE {
        let event = match rx.try_recv() {
            Ok(event) => event,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) if !waiting => break,
            Err(mpsc::error::TryRecvError::Empty) => {
                match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(event)) => event,
                    Ok(None) | Err(_) => break,
                }
            }
        };
        waiting &= event.name != DONE;
        burst.push(event);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, name: &str) -> JobEvent {
        JobEvent {
            job_id: Uuid::nil(),
            seq,
            created_at: Utc::now(),
            name: name.to_string(),
            data: serde_json::Value::Null,
        }
    }

    fn seqs(burst: &[JobEvent]) -> Vec<i64> {
        burst.iter().map(|e| e.seq).collect()
    }

    /// Far longer than any test waits: a burst that ends before it ended for another reason.
    const LONG: Duration = Duration::from_secs(30);

    /// The next burst's events with a linger of [`LONG`], which must end (within 10 s) for a
    /// reason other than the linger: `why` says which. The tests run on tokio's paused clock,
    /// which jumps to the next timer when every task waits, so a burst that waited for its
    /// linger would meet the 10 s bound first, and the tests take no real time.
    async fn burst_ended_early(rx: &mut mpsc::UnboundedReceiver<JobEvent>, why: &str) -> Vec<i64> {
        let mut burst = Vec::new();
        let gathered = tokio::time::timeout(Duration::from_secs(10), async {
            next_burst(rx, &mut burst, LONG).await
        })
        .await
        .expect(why);
        assert!(gathered);
        seqs(&burst)
    }

    #[tokio::test(start_paused = true)]
    async fn events_arriving_within_the_linger_go_out_together_and_done_ends_the_wait() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(event(1, "queued")).unwrap();
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            tx.send(event(2, "file_started")).unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
            tx.send(event(3, DONE)).unwrap();
            tx.send(event(4, "queued")).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(event(5, "queued")).unwrap();
            tx
        });
        let burst = burst_ended_early(&mut rx, "done ends the wait before the linger does").await;
        // The event queued with `done` goes too; the one sent later waits for the next burst.
        assert_eq!(burst, [1, 2, 3, 4]);
        let _tx = sender.await.unwrap();
        let mut burst = Vec::new();
        assert!(next_burst(&mut rx, &mut burst, Duration::ZERO).await);
        assert_eq!(seqs(&burst), [5]);
    }

    #[tokio::test(start_paused = true)]
    async fn everything_queued_goes_out_in_one_burst_past_any_done() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for (seq, name) in [
            (1, "queued"),
            (2, DONE),
            (3, "queued"),
            (4, DONE),
            (5, "file_started"),
        ] {
            tx.send(event(seq, name)).unwrap();
        }
        let burst =
            burst_ended_early(&mut rx, "a burst with a done does not wait for the linger").await;
        assert_eq!(burst, [1, 2, 3, 4, 5]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_after_the_linger_starts_the_next_burst() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(event(1, "queued")).unwrap();
        let mut burst = Vec::new();
        assert!(next_burst(&mut rx, &mut burst, Duration::from_millis(20)).await);
        assert_eq!(seqs(&burst), [1]);
        tx.send(event(2, "file_started")).unwrap();
        tx.send(event(3, "file_started")).unwrap();
        burst.clear();
        assert!(next_burst(&mut rx, &mut burst, Duration::from_millis(20)).await);
        assert_eq!(seqs(&burst), [2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_queue_ends_the_burst_and_then_the_writer() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        tx.send(event(1, "queued")).unwrap();
        drop(tx);
        let burst = burst_ended_early(&mut rx, "a closed queue does not wait for the linger").await;
        assert_eq!(burst, [1]);
        let mut burst = Vec::new();
        assert!(!next_burst(&mut rx, &mut burst, LONG).await);
        assert!(burst.is_empty());
    }
}
