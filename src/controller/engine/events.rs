//! Events leave through a queue drained by one background task, as client-go's event broadcaster does: a
//! reconcile never waits for them, so recording that a ConfigMap was created does not hold a concurrency
//! slot for another round trip, and a slow events API never slows reconciling.

use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Events published at the same time; enough to keep up with any reconcile concurrency seen in practice.
const PUBLISHERS: usize = 8;

pub struct EventQueue {
    sender: Mutex<Option<mpsc::UnboundedSender<(Event, ObjectReference)>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl EventQueue {
    pub fn new(recorder: Recorder) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel::<(Event, ObjectReference)>();
        let queued = futures::stream::unfold(receiver, |mut r| async move { r.recv().await.map(|item| (item, r)) });
        let task = tokio::spawn(queued.for_each_concurrent(PUBLISHERS, move |(event, reference)| {
            let recorder = recorder.clone();
            async move {
                // Bounded like every other request, so a hung events call cannot hold a publisher for good.
                let published =
                    tokio::time::timeout(super::request::REQUEST_TIMEOUT, recorder.publish(&event, &reference));
                let failure = match published.await {
                    Ok(Ok(())) => None,
                    Ok(Err(err)) => Some(crate::error::describe(&err)),
                    Err(_) => Some(format!("no answer within {}s", super::request::REQUEST_TIMEOUT.as_secs())),
                };
                if let Some(failure) = failure {
                    let object =
                        format!("{}/{}", reference.namespace.unwrap_or_default(), reference.name.unwrap_or_default());
                    tracing::warn!(object, "cannot record an event: {failure}");
                }
            }
        }));
        EventQueue { sender: Mutex::new(Some(sender)), task: Mutex::new(Some(task)) }
    }

    pub fn send(&self, event: Event, regarding: ObjectReference) {
        if let Some(sender) = self.sender.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = sender.send((event, regarding));
        }
    }

    /// Sends what is queued and stops taking more: before `--once` exits, or the controller stops. Gives
    /// up after `within`, so that an API server that stopped answering cannot hold up the exit.
    pub async fn flush(&self, within: Duration) {
        drop(self.sender.lock().unwrap_or_else(|e| e.into_inner()).take());
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task
            && tokio::time::timeout(within, task).await.is_err()
        {
            tracing::warn!("gave up on events not sent within {}s", within.as_secs());
        }
    }
}
