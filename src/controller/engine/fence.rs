//! The time fence of a process that writes only while it holds a Lease (leader election, or a shard
//! member's): open until the renew deadline of the last renewal it sent, closed once the Lease is lost,
//! released or not yet held. The engine checks it right before every write it sends, so a process
//! frozen past its renew deadline, or cut off from the API server, sends nothing when it comes back,
//! whatever its reconciles were doing. It does not recall a request already on its way: the writes to a
//! parent carry preconditions for that (see ARCHITECTURE.md, "Who may write what").

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Shared by the election that opens it and the reconciles that check it; `Fence::default()` belongs
/// to a process that holds no Lease and is never fenced.
#[derive(Debug, Clone, Default)]
pub struct Fence(Option<Arc<Mutex<Option<Instant>>>>);

impl Fence {
    /// A fence that stays closed until an election opens it.
    pub fn closed() -> Self {
        Fence(Some(Arc::new(Mutex::new(None))))
    }

    /// Writes may be sent until `until`.
    pub fn open_until(&self, until: Instant) {
        if let Some(cell) = &self.0 {
            *cell.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
        }
    }

    /// No more writes.
    pub fn close(&self) {
        if let Some(cell) = &self.0 {
            *cell.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    /// Whether a write may be sent now.
    pub fn open(&self) -> bool {
        self.open_at(Instant::now())
    }

    fn open_at(&self, now: Instant) -> bool {
        match &self.0 {
            None => true,
            Some(cell) => cell.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|until| now < until),
        }
    }
}

impl super::request::Gate for Fence {
    fn open(&self) -> bool {
        Fence::open(self)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_fence_is_open_only_until_the_deadline_it_was_given() {
        assert!(Fence::default().open(), "a process without a Lease is never fenced");
        let fence = Fence::closed();
        let now = Instant::now();
        assert!(!fence.open_at(now), "closed until the Lease is held");
        let shared = fence.clone();
        fence.open_until(now + Duration::from_secs(2));
        assert!(shared.open_at(now + Duration::from_secs(1)));
        assert!(!shared.open_at(now + Duration::from_secs(2)), "the deadline itself is past");
        fence.open_until(now + Duration::from_secs(4));
        assert!(shared.open_at(now + Duration::from_secs(3)), "a renewal moves it on");
        fence.close();
        assert!(!shared.open_at(now), "lost or released");
    }
}
