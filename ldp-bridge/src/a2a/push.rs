//! A2A push notifications: the task's events POSTed to the webhooks its client registered, each target with its
//! own bounded queue and one delivery loop (events arrive in order), retried with backoff, and never sent to a
//! loopback, private or link-local address unless the configuration allows it (a webhook URL is the client's to
//! choose, so without that rule any client could make the server call into its own network).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2a::{StreamResponse, TaskPushNotificationConfig};
use serde_json::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// The header carrying a target's own token, so that the receiver can tell the notification is for it.
pub const TOKEN_HEADER: &str = "X-A2A-Notification-Token";

/// The bounds and rules of push notification delivery.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PushLimits {
    /// Whether push notifications are offered at all (the card's `capabilities.pushNotifications`).
    pub enabled: bool,
    /// Deliver to loopback, private, link-local and other non-public addresses too (for tests and closed
    /// networks); off, such a target is refused when registered and again at each delivery.
    pub allow_private: bool,
    /// Hosts (as written in the URL) exempt from the address rule, e.g. one internal receiver.
    pub allowed_hosts: Vec<String>,
    /// Targets one task may have.
    pub max_per_task: usize,
    /// Targets held at once, over all tasks; beyond it a registration is refused with `CAPACITY_EXCEEDED`.
    pub max_targets: usize,
    /// Events queued for one target; beyond it the oldest progress event is dropped (a terminal one never is).
    pub queue: usize,
    /// Attempts per event (the first and the retries).
    pub attempts: u32,
    /// Longest one attempt (connect, send, answer) may take.
    pub timeout: Duration,
    /// The wait before the first retry, doubled for each next one.
    pub backoff: Duration,
}

impl Default for PushLimits {
    fn default() -> Self {
        Self {
            enabled: true,
            allow_private: false,
            allowed_hosts: Vec::new(),
            max_per_task: 8,
            max_targets: 1024,
            queue: 64,
            attempts: 4,
            timeout: Duration::from_secs(5),
            backoff: Duration::from_millis(500),
        }
    }
}

/// Why a webhook target was refused or a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The URL is not an absolute `http` or `https` URL with a host and without credentials.
    #[error("the push URL {0:?} is not an http(s) URL with a host and without credentials")]
    BadUrl(String),
    /// The host did not resolve.
    #[error("the push URL's host {0:?} does not resolve")]
    Unresolved(String),
    /// The host resolves to an address the rules forbid.
    #[error("the push URL's host {host:?} resolves to {addr}, a non-public address (not allowed by configuration)")]
    Forbidden {
        /// The host.
        host: String,
        /// The forbidden address.
        addr: IpAddr,
    },
}

/// Whether `ip` is an address a webhook may not reach by default: anything but a global unicast address.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b)) // shared address space (carrier-grade NAT)
                || (a == 198 && (18..20).contains(&b)) // benchmarking
                || a >= 240 // reserved
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_private(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
                || (first == 0x2001 && v6.segments()[1] == 0x0db8) // documentation
                || (first == 0x0064 && v6.segments()[1] == 0xff9b) // NAT64, which can reach IPv4 private space
        }
    }
}

/// The URL's host and the addresses it may be reached at, checked against the rules.
pub async fn check_url(url: &str, limits: &PushLimits) -> Result<(String, Vec<SocketAddr>), PushError> {
    let bad = || PushError::BadUrl(url.to_owned());
    let parsed = reqwest::Url::parse(url).map_err(|_| bad())?;
    if !matches!(parsed.scheme(), "http" | "https") || !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad());
    }
    let host = parsed.host_str().ok_or_else(bad)?.to_owned();
    let port = parsed.port_or_known_default().ok_or_else(bad)?;
    let bare = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare.as_str(), port))
            .await
            .map_err(|_| PushError::Unresolved(host.clone()))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(PushError::Unresolved(host));
    }
    let exempt = limits.allow_private || limits.allowed_hosts.iter().any(|h| h.eq_ignore_ascii_case(&host));
    if !exempt && let Some(addr) = addrs.iter().find(|a| is_private(a.ip())) {
        return Err(PushError::Forbidden { host, addr: addr.ip() });
    }
    Ok((bare, addrs))
}

/// The events waiting for one target. Bounded: when full, the oldest progress event makes room; terminal events
/// (and the task snapshots a subscriber could not do without) are kept.
#[derive(Default)]
struct Queue {
    events: Mutex<(VecDeque<StreamResponse>, bool)>,
    ready: Notify,
}

fn is_final(event: &StreamResponse) -> bool {
    match event {
        StreamResponse::StatusUpdate(update) => {
            update.status.state.is_terminal() || update.status.state == a2a::TaskState::InputRequired
        }
        StreamResponse::ArtifactUpdate(_) | StreamResponse::Task(_) | StreamResponse::Message(_) => true,
    }
}

impl Queue {
    fn push(&self, event: StreamResponse, bound: usize) {
        if let Ok(mut guard) = self.events.lock() {
            let (queue, closed) = &mut *guard;
            if *closed {
                return;
            }
            if queue.len() >= bound.max(1) {
                match queue.iter().position(|e| !is_final(e)) {
                    Some(oldest) => {
                        queue.remove(oldest);
                    }
                    // Everything queued must be delivered; a progress event is the one to lose.
                    None if !is_final(&event) => return,
                    None => {}
                }
            }
            queue.push_back(event);
        }
        self.ready.notify_one();
    }

    fn close(&self) {
        if let Ok(mut guard) = self.events.lock() {
            guard.1 = true;
        }
        self.ready.notify_one();
    }

    /// The next event, or `None` once closed and drained.
    async fn next(&self) -> Option<StreamResponse> {
        loop {
            {
                let mut guard = self.events.lock().ok()?;
                if let Some(event) = guard.0.pop_front() {
                    return Some(event);
                }
                if guard.1 {
                    return None;
                }
            }
            self.ready.notified().await;
        }
    }
}

/// One registered webhook: its config as the client wrote it (with ids filled in) and its queue.
struct Target {
    config: TaskPushNotificationConfig,
    queue: Arc<Queue>,
    bound: usize,
}

/// The push targets of one task. Dropping it (the task left the table) ends their delivery loops once drained.
#[derive(Default)]
pub(crate) struct Targets {
    targets: Mutex<Vec<Target>>,
}

impl Drop for Targets {
    fn drop(&mut self) {
        self.close();
    }
}

/// What a registration was refused for.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The URL broke a rule.
    Url(PushError),
    /// The task or the server has as many targets as allowed.
    Full(&'static str, usize),
}

/// What every task's targets share: the rules and bounds, and the count of targets held.
pub(crate) struct Pusher {
    pub(crate) limits: PushLimits,
    held: Arc<Semaphore>,
}

impl Pusher {
    pub(crate) fn new(limits: PushLimits) -> Self {
        let held = Arc::new(Semaphore::new(limits.max_targets.max(1)));
        Self { limits, held }
    }

    /// Registers `config` on `targets` (replacing one of the same id) and starts its delivery loop. Returns the
    /// config as stored (its id chosen when it had none).
    pub(crate) async fn add(
        &self,
        targets: &Targets,
        task_id: &str,
        mut config: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, Refused> {
        check_url(&config.url, &self.limits).await.map_err(Refused::Url)?;
        config.task_id = task_id.to_owned();
        let id = config.id.clone().filter(|i| !i.is_empty()).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        config.id = Some(id.clone());
        let mut list = targets.targets.lock().map_err(|_| Refused::Full("push targets", 0))?;
        if let Some(old) = list.iter().position(|t| t.config.id.as_deref() == Some(&id)) {
            list.remove(old).queue.close();
        }
        if list.len() >= self.limits.max_per_task.max(1) {
            return Err(Refused::Full("push targets of a task", self.limits.max_per_task));
        }
        let permit = self
            .held
            .clone()
            .try_acquire_owned()
            .map_err(|_| Refused::Full("push targets", self.limits.max_targets))?;
        let queue = Arc::new(Queue::default());
        list.push(Target { config: config.clone(), queue: queue.clone(), bound: self.limits.queue });
        tokio::spawn(deliver_all(queue, config.clone(), self.limits.clone(), permit));
        Ok(config)
    }

    /// The task's target `id`.
    pub(crate) fn find(targets: &Targets, id: &str) -> Option<TaskPushNotificationConfig> {
        let list = targets.targets.lock().ok()?;
        list.iter().find(|t| t.config.id.as_deref() == Some(id)).map(|t| t.config.clone())
    }

    /// Every target of the task.
    pub(crate) fn all(targets: &Targets) -> Vec<TaskPushNotificationConfig> {
        targets.targets.lock().map(|l| l.iter().map(|t| t.config.clone()).collect()).unwrap_or_default()
    }

    /// Removes the task's target `id` (what it had queued is dropped); whether there was one.
    pub(crate) fn remove(targets: &Targets, id: &str) -> bool {
        let Ok(mut list) = targets.targets.lock() else { return false };
        let Some(at) = list.iter().position(|t| t.config.id.as_deref() == Some(id)) else { return false };
        list.remove(at).queue.close();
        true
    }
}

impl Targets {
    /// Ends every target's delivery once what it has queued is sent (the task ended).
    pub(crate) fn close(&self) {
        if let Ok(targets) = self.targets.lock() {
            targets.iter().for_each(|t| t.queue.close());
        }
    }

    /// Queues `event` for every target (never waits).
    pub(crate) fn notify(&self, event: &StreamResponse) {
        if let Ok(list) = self.targets.lock() {
            for target in list.iter() {
                target.queue.push(event.clone(), target.bound);
            }
        }
    }
}

/// The delivery loop of one target: each event in order, until the queue is closed and drained.
async fn deliver_all(
    queue: Arc<Queue>,
    config: TaskPushNotificationConfig,
    limits: PushLimits,
    permit: OwnedSemaphorePermit,
) {
    while let Some(event) = queue.next().await {
        let body = serde_json::to_value(&event).unwrap_or(Value::Null);
        if let Err(why) = deliver(&config, &body, &limits).await {
            tracing::warn!(url = %config.url, task = %config.task_id, "push notification not delivered: {why}");
        }
    }
    drop(permit);
}

/// One event to one target: checked again (the name may resolve elsewhere now), pinned to the checked addresses,
/// retried with backoff on a connection failure, a timeout, a 429 or a 5xx answer.
async fn deliver(config: &TaskPushNotificationConfig, body: &Value, limits: &PushLimits) -> Result<(), String> {
    let mut wait = limits.backoff;
    let mut last = String::new();
    for attempt in 0..limits.attempts.max(1) {
        if attempt > 0 {
            tokio::time::sleep(wait).await;
            wait = wait.saturating_mul(2);
        }
        let (host, addrs) = check_url(&config.url, limits).await.map_err(|e| e.to_string())?;
        let client = reqwest::Client::builder()
            .resolve_to_addrs(&host, &addrs)
            .redirect(reqwest::redirect::Policy::none())
            .timeout(limits.timeout)
            .build()
            .map_err(|e| e.to_string())?;
        let mut request = client.post(&config.url).header(a2a::SVC_PARAM_VERSION, a2a::VERSION).json(body);
        if let Some(token) = config.token.as_deref().filter(|t| !t.is_empty()) {
            request = request.header(TOKEN_HEADER, token);
        }
        if let Some(auth) = &config.authentication
            && let Some(credentials) = auth.credentials.as_deref().filter(|c| !c.is_empty())
        {
            request = request.header(reqwest::header::AUTHORIZATION, format!("{} {credentials}", auth.scheme));
        }
        match request.send().await {
            Ok(answer) if answer.status().is_success() => return Ok(()),
            Ok(answer) if answer.status().is_server_error() || answer.status().as_u16() == 429 => {
                last = format!("HTTP {}", answer.status());
            }
            Ok(answer) => return Err(format!("HTTP {}", answer.status())),
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("{} attempts failed, the last with {last}", limits.attempts.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses_are_told_apart() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
            "224.0.0.1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn urls_are_checked() {
        let strict = PushLimits::default();
        for bad in ["ftp://x/", "not a url", "http://user:pw@8.8.8.8/", "/relative"] {
            assert!(matches!(check_url(bad, &strict).await, Err(PushError::BadUrl(_))), "{bad}");
        }
        let refused = check_url("http://127.0.0.1:9/hook", &strict).await;
        assert!(matches!(refused, Err(PushError::Forbidden { .. })), "{refused:?}");
        assert!(matches!(check_url("http://[::1]:9/", &strict).await, Err(PushError::Forbidden { .. })));
        assert!(check_url("http://8.8.8.8/hook", &strict).await.is_ok());
        let mut allowed = PushLimits::default();
        allowed.allowed_hosts.push("127.0.0.1".into());
        assert!(check_url("http://127.0.0.1:9/hook", &allowed).await.is_ok());
        assert!(matches!(check_url("http://127.0.0.2:9/", &allowed).await, Err(PushError::Forbidden { .. })));
        allowed.allow_private = true;
        assert!(check_url("http://10.0.0.1/", &allowed).await.is_ok());
    }

    #[tokio::test]
    async fn a_full_queue_loses_progress_never_the_end() {
        let queue = Queue::default();
        let status = |state: a2a::TaskState| {
            StreamResponse::StatusUpdate(a2a::TaskStatusUpdateEvent {
                task_id: "t".into(),
                context_id: "c".into(),
                status: a2a::TaskStatus { state, message: None, timestamp: None },
                metadata: None,
            })
        };
        for _ in 0..5 {
            queue.push(status(a2a::TaskState::Working), 2);
        }
        queue.push(status(a2a::TaskState::Completed), 2);
        queue.push(status(a2a::TaskState::Completed), 2);
        queue.push(status(a2a::TaskState::Working), 2);
        queue.close();
        let mut got = Vec::new();
        while let Some(StreamResponse::StatusUpdate(u)) = queue.next().await {
            got.push(u.status.state);
        }
        assert_eq!(got, [a2a::TaskState::Completed, a2a::TaskState::Completed]);
    }
}
