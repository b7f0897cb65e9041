//! Leader election on a coordination.k8s.io Lease, with client-go's algorithm and controller-runtime's
//! defaults (15 s lease, 10 s renew deadline, 2 s retry). Written here rather than taken from a crate:
//! kube has no election of its own, and the one election crate built on kube 5 (kube-lease-manager) lets
//! a standby sleep until the old lease would have expired, so a released lease waits up to a whole lease
//! duration instead of one retry period.
//!
//! Every retry period a candidate reads the Lease: it renews it if it holds it, takes it (with an update
//! guarded by resourceVersion) if it is free or has not been renewed for a lease duration as seen by this
//! candidate's own clock, and otherwise waits: a retry period, or less, to read it again just as it runs
//! out by that clock. A leader that cannot renew for the renew deadline stops leading, whatever its
//! requests are doing: every attempt is cut off at the deadline, as client-go does,
//! because kube sets no read timeout and a request to a wedged API server may never return. Releasing
//! clears the holder so a standby takes over at its next retry.
//!
//! Every process is an incarnation of its own: its holder identity is the replica's name (POD_NAME, the
//! hostname, `--leader-election-identity` or the shard member) with a random id made at start, as
//! controller-runtime adds a UUID to the hostname. A container restarted in place keeps its POD_NAME,
//! and a second process may be started under a taken name by mistake; with the name alone either would
//! find the Lease "held by itself" and act at once beside the first. With the id, it is another holder
//! and stands by until the Lease is released or runs out.
//!
//! While it holds the Lease, an election keeps its [`Fence`] open until the renew deadline of the last
//! renewal it sent: the engine checks it before every write, so no write is sent once this process may
//! have been given up on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::engine::fence::Fence;
use super::serve::health::Health;

#[derive(Debug, Clone)]
pub struct Election {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Labels the Lease carries (a shard member's names its ring).
    pub labels: BTreeMap<String, String>,
    /// Opened until each renewal's renew deadline while holding, closed otherwise.
    pub fence: Fence,
    /// Whether it stands again after it lost the Lease (the coordinator's candidacy). A leader or a
    /// shard member does not, as client-go's does not: it stops, so that nothing it still had running
    /// can find the fence open again.
    pub stand_again: bool,
    /// An annotation its renewals write (the shard ring's adoption records, which only the holder of
    /// the coordinator's Lease writes): a value is written, at once, only while the Lease is held in the
    /// term it names ([`Candidate::term`]), so that a value meant for an earlier term is never written
    /// into a later one.
    pub annotation: Option<(String, Annotation)>,
}

/// The value an election's renewals write to an annotation, for the term it names.
pub type Annotation = watch::Receiver<Option<(u64, String)>>;

/// A running election: `leading` is true while this replica holds the lease.
pub struct Candidate {
    pub leading: watch::Receiver<bool>,
    /// How many times this candidate has come to hold the Lease: the current term while it holds it.
    term: Arc<AtomicU64>,
    release: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// How many characters the per-process id has: 36^6, about two billion, values.
const INCARNATION_LEN: usize = 6;

/// This process's random id, made once: lower-case letters and digits, so that it fits in a label value
/// and a Lease's name alike.
pub fn incarnation() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
        let mut bytes = [0u8; INCARNATION_LEN];
        if getrandom::fill(&mut bytes).is_err() {
            // No system randomness (never on Linux): the clock's nanoseconds and the process id still
            // tell two processes apart.
            let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos())
                ^ u128::from(std::process::id()) << 64;
            bytes = std::array::from_fn(|i| (seed >> (i * 8)) as u8);
        }
        bytes.iter().map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect()
    })
}

/// The replica's name: the pod's, or the hostname.
fn host() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|pod| !pod.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_owned()))
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "samplectl".to_owned())
}

/// The holder identity of this process under the replica name `name`: the name, then '_' and the
/// per-process id.
pub fn identity_of(name: &str) -> String {
    format!("{name}_{}", incarnation())
}

/// This process's holder identity when none is given: the pod's name or the hostname, with the
/// per-process id.
pub fn default_identity() -> String {
    identity_of(&host())
}

/// A member's name when none is given: the pod's name, or the hostname, in lower case with anything a
/// Lease's name cannot hold made '-'.
pub fn default_member() -> String {
    let name: String =
        host().to_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' }).collect();
    let name: String = name.chars().take(63).collect();
    name.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned()
}

/// What one look at the Lease found.
#[derive(Debug, PartialEq, Eq)]
enum Look {
    Holding,
    HeldByOther(String),
}

/// The Lease record as last seen, and when this candidate saw it change: expiry is judged by our own
/// clock from that moment, never by comparing another host's timestamps with ours.
struct Observed {
    record: (Option<String>, Option<MicroTime>),
    since: Instant,
    /// The Lease's duration as it last read.
    duration: Duration,
}

impl Observed {
    /// When the Lease runs out by this candidate's clock, if it has a holder.
    fn runs_out(&self) -> Option<Instant> {
        self.record.0.as_ref().map(|_| self.since + self.duration)
    }
}

/// How far past a Lease's running out a standby reads it again, so that its clock surely shows it run out.
const RUN_OUT_MARGIN: Duration = Duration::from_millis(10);

/// How long a standby waits before it reads the Lease again: a retry period, or until just after the
/// Lease runs out (`runs_out`) if that comes sooner. So it takes over when the Lease runs out, not up to a
/// retry period later as client-go's standbys do: a coordinator's failover is a second sooner on average
/// with the default 2 s retry period. Whether it has run out is judged as before, by the read then.
fn standby_pause(retry_period: Duration, runs_out: Option<Instant>, now: Instant) -> Duration {
    match runs_out {
        Some(at) if at > now => retry_period.min(at - now + RUN_OUT_MARGIN),
        _ => retry_period,
    }
}

impl Election {
    /// The order the three timings must keep, as client-go's leader election requires it; the command
    /// line checks it before anything starts.
    pub fn check_timing(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<(), String> {
        if renew_deadline >= lease_duration {
            return Err("--renew-deadline must be shorter than --lease-duration".into());
        }
        if retry_period >= renew_deadline {
            return Err("--retry-period must be shorter than --renew-deadline".into());
        }
        Ok(())
    }

    pub fn start(self, client: Client, health: Arc<Health>) -> Result<Candidate> {
        Self::check_timing(self.lease_duration, self.renew_deadline, self.retry_period).map_err(anyhow::Error::msg)?;
        let (leading_tx, leading) = watch::channel(false);
        let (release, mut release_rx) = watch::channel(false);
        let api: Api<Lease> = crate::cluster::scope::api(client, Some(&self.namespace));
        let term = Arc::new(AtomicU64::new(0));
        let terms = term.clone();
        let task = tokio::spawn(async move {
            let mut observed: Option<Observed> = None;
            // When the last successful renewal was sent: the renew deadline runs from there.
            let mut renewed: Option<Instant> = None;
            // The holder last seen while standing by, so that a standby says once whom it waits for.
            let mut standing_by: Option<String> = None;
            let mut annotation = self.annotation.as_ref().map(|(_, value)| value.clone());
            loop {
                let sent = Instant::now();
                let limit = match renewed {
                    Some(at) => (at + self.renew_deadline).saturating_duration_since(sent),
                    None => self.renew_deadline,
                };
                let attempt = tokio::time::timeout(limit, self.try_acquire_or_renew(&api, &mut observed, &terms));
                // A release (SIGTERM, or the work ending) does not wait for a hung attempt.
                let outcome = tokio::select! {
                    outcome = attempt => outcome.unwrap_or_else(|_| {
                        Err(anyhow!("the Lease request did not answer within {:.1}s", limit.as_secs_f64()))
                    }),
                    () = released(&mut release_rx) => return self.give_up(&api, &leading_tx).await,
                };
                health.lease(outcome.is_ok());
                match outcome {
                    Ok(Look::Holding) => {
                        renewed = Some(sent);
                        // From when the renewal was sent, not answered: whoever judges this Lease saw it
                        // renewed no earlier than that.
                        self.fence.open_until(sent + self.renew_deadline);
                        // A new term begins before anyone is told it holds.
                        if !*leading_tx.borrow() {
                            terms.fetch_add(1, Ordering::SeqCst);
                        }
                        leading_tx.send_if_modified(|l| !std::mem::replace(l, true));
                    }
                    Ok(Look::HeldByOther(holder)) => {
                        renewed = None;
                        self.fence.close();
                        if leading_tx.send_if_modified(|l| std::mem::replace(l, false)) {
                            tracing::warn!("the lease {}/{} is now held by {holder}", self.namespace, self.name);
                            if !self.stand_again {
                                return;
                            }
                        } else if standing_by.as_ref() != Some(&holder) {
                            tracing::info!(
                                "the lease {}/{} is held by {holder}; standing by as {}",
                                self.namespace,
                                self.name,
                                self.identity
                            );
                        }
                        standing_by = Some(holder);
                    }
                    Err(err) => {
                        tracing::warn!("leader election: {}", crate::error::describe_any(&err));
                        if renewed.is_some_and(|at| at.elapsed() >= self.renew_deadline) {
                            renewed = None;
                            tracing::warn!(
                                "could not renew the lease {}/{} within the renew deadline ({}s)",
                                self.namespace,
                                self.name,
                                self.renew_deadline.as_secs_f64()
                            );
                            self.fence.close();
                            leading_tx.send_replace(false);
                            if !self.stand_again {
                                return;
                            }
                        }
                    }
                }
                // A leader never sleeps past its renew deadline: the next attempt, cut off at once if the
                // deadline has passed, is what steps it down.
                let pause = match renewed {
                    Some(at) => {
                        self.retry_period.min((at + self.renew_deadline).saturating_duration_since(Instant::now()))
                    }
                    None => {
                        standby_pause(self.retry_period, observed.as_ref().and_then(Observed::runs_out), Instant::now())
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = annotated(&mut annotation), if renewed.is_some() => {}
                    () = released(&mut release_rx) => return self.give_up(&api, &leading_tx).await,
                }
            }
        });
        Ok(Candidate { leading, term, release, task })
    }

    /// Stops leading and, if this replica was leading, clears the Lease's holder so that a standby takes
    /// over at its next retry.
    async fn give_up(&self, api: &Api<Lease>, leading: &watch::Sender<bool>) {
        // Nothing more is written once the Lease may be another's.
        self.fence.close();
        if !leading.send_replace(false) {
            return;
        }
        match tokio::time::timeout(self.renew_deadline, self.release(api)).await {
            Ok(Ok(())) => tracing::info!("released the lease {}/{}", self.namespace, self.name),
            Ok(Err(err)) => {
                tracing::warn!("cannot release the lease (it will expire): {}", crate::error::describe_any(&err))
            }
            Err(_) => tracing::warn!("releasing the lease did not answer in time; it will expire"),
        }
    }

    fn now() -> MicroTime {
        MicroTime(Timestamp::now())
    }

    #[allow(clippy::disallowed_methods)] // the Lease is the fence: its writes are guarded by its resourceVersion
    async fn try_acquire_or_renew(
        &self,
        api: &Api<Lease>,
        observed: &mut Option<Observed>,
        term: &AtomicU64,
    ) -> Result<Look> {
        let Some(mut lease) = api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    labels: Some(self.labels.clone()).filter(|l| !l.is_empty()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(Some(Self::now()), 0)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Look::Holding),
                Err(err) if crate::error::status_code(&err) == Some(409) => {
                    Ok(Look::HeldByOther("another candidate".into()))
                }
                Err(err) => Err(err.into()),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (holder.clone(), spec.renew_time.clone());
        let duration =
            spec.lease_duration_seconds.map_or(self.lease_duration, |s| Duration::from_secs(s.max(0) as u64));
        match observed {
            Some(o) if o.record == record => o.duration = duration,
            _ => *observed = Some(Observed { record, since: Instant::now(), duration }),
        }
        // A held Lease is taken once it has run out; a free one (no holder) at once, below.
        let expired = observed.as_ref().and_then(Observed::runs_out).is_some_and(|at| Instant::now() > at);
        let transitions = spec.lease_transitions.unwrap_or(0);
        let new_spec = match &holder {
            Some(h) if *h == self.identity => {
                LeaseSpec { renew_time: Some(Self::now()), ..self.spec(spec.acquire_time, transitions) }
            }
            Some(h) if !expired => return Ok(Look::HeldByOther(h.clone())),
            _ => self.spec(Some(Self::now()), transitions + 1),
        };
        let renewing = holder.as_deref() == Some(self.identity.as_str());
        lease.spec = Some(new_spec);
        if let Some((key, value)) = &self.annotation
            && let Some((for_term, value)) = value.borrow().clone()
            && renewing
            && for_term == term.load(Ordering::SeqCst)
        {
            lease.metadata.annotations.get_or_insert_with(BTreeMap::new).insert(key.clone(), value);
        }
        if !self.labels.is_empty() {
            lease.metadata.labels.get_or_insert_with(BTreeMap::new).extend(self.labels.clone());
        }
        // A replace carries the resourceVersion we read: if another candidate wrote in between, ours fails.
        match api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(Look::Holding),
            Err(err) if crate::error::status_code(&err) == Some(409) => {
                Ok(Look::HeldByOther(holder.unwrap_or_default()))
            }
            Err(err) => Err(err.into()),
        }
    }

    fn spec(&self, acquire_time: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            // Whole seconds, rounded up: a standby must never think the lease expired sooner than we do.
            lease_duration_seconds: Some(self.lease_duration.as_secs_f64().ceil().max(1.0) as i32),
            acquire_time,
            renew_time: Some(Self::now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// As client-go does it: no holder and a one-second duration, so standbys take over at once.
    #[allow(clippy::disallowed_methods)] // the Lease is the fence: its writes are guarded by its resourceVersion
    async fn release(&self, api: &Api<Lease>) -> Result<()> {
        let Some(mut lease) = api.get_opt(&self.name).await? else { return Ok(()) };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            bail!("the lease is held by {:?}, not by us", spec.holder_identity);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        api.replace(&self.name, &PostParams::default(), &lease).await?;
        Ok(())
    }
}

/// A new value for the annotation, to be written without waiting for the next renewal.
async fn annotated(annotation: &mut Option<Annotation>) {
    let Some(value) = annotation else { return std::future::pending().await };
    if value.changed().await.is_err() {
        *annotation = None;
        std::future::pending::<()>().await;
    }
}

async fn released(release: &mut watch::Receiver<bool>) {
    let _ = release.wait_for(|r| *r).await;
}

impl Candidate {
    /// Gives the lease up (if held) and waits, briefly, for that to reach the API server.
    /// The term of this candidate's hold on the Lease (meaningful while `leading` is true).
    pub fn term(&self) -> u64 {
        self.term.load(Ordering::SeqCst)
    }

    pub async fn release(self) {
        let _ = self.release.send(true);
        if tokio::time::timeout(Duration::from_secs(5), self.task).await.is_err() {
            tracing::warn!("releasing the lease took too long; it will expire on its own");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_must_nest() {
        let check = |lease, renew, retry| {
            Election::check_timing(Duration::from_secs(lease), Duration::from_secs(renew), Duration::from_secs(retry))
        };
        assert!(check(15, 10, 2).is_ok());
        assert!(check(10, 10, 2).unwrap_err().contains("--renew-deadline"));
        assert!(check(15, 10, 10).unwrap_err().contains("--retry-period"));
    }

    #[test]
    fn a_standby_reads_the_lease_again_when_it_runs_out_or_after_a_retry_period() {
        let retry = Duration::from_secs(2);
        let now = Instant::now();
        // No holder seen (or none yet read): the next retry.
        assert_eq!(standby_pause(retry, None, now), retry);
        // Running out within the retry period: just after it does.
        let soon = now + Duration::from_millis(700);
        assert_eq!(standby_pause(retry, Some(soon), now), Duration::from_millis(700) + RUN_OUT_MARGIN);
        // Later than a retry period: the next retry.
        assert_eq!(standby_pause(retry, Some(now + Duration::from_secs(9)), now), retry);
        // Run out already (taking it failed, say, to another standby's write): the next retry, never a
        // read at once again and again.
        assert_eq!(standby_pause(retry, Some(now - Duration::from_millis(1)), now), retry);
        assert_eq!(standby_pause(retry, Some(now), now), retry);

        let seen = |holder: Option<&str>| Observed {
            record: (holder.map(str::to_owned), None),
            since: now,
            duration: Duration::from_secs(15),
        };
        assert_eq!(seen(Some("a_k3x9qa")).runs_out(), Some(now + Duration::from_secs(15)));
        assert_eq!(seen(None).runs_out(), None, "a released Lease is taken at once, not waited for");
    }
}
