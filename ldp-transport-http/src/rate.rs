//! Per-principal rate limiting with `governor`: a request over its principal's quota is answered `429` with
//! `Retry-After` and a retryable `CAPACITY_EXCEEDED` error, before any work is done for it.

use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::response::Response;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use ldp_session::{PeerContext, RefusalLog};
use ldp_types::{LdpError, codes};

use ldp_edge::BearerAuth;
use ldp_edge::refusal_with_retry;

/// How many requests each principal may send: a sustained rate per second with an equal burst.
///
/// The principal is the authenticated credential (a bearer token, a mapped client certificate) when there is one,
/// otherwise the client's address (an IPv6 client by its /64 prefix, which one host usually controls whole; behind a
/// trusted proxy, the client it names: [`HttpServerConfig::trusted_proxies`](crate::HttpServerConfig)). Never what
/// the request body declares. Parsed from `N/s` or `N/m` (`--rate-limit 50/s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    quota: Quota,
    /// Distinct principals tracked at once (default 100,000). When more are active, unauthenticated clients beyond
    /// the table share one quota, so a peer cycling through addresses cannot grow the table.
    pub max_principals: usize,
}

impl RateLimit {
    /// `n` requests per second, with a burst of `n`.
    pub fn per_second(n: NonZeroU32) -> Self {
        Self { quota: Quota::per_second(n), max_principals: 100_000 }
    }

    /// `n` requests per minute, with a burst of `n`.
    pub fn per_minute(n: NonZeroU32) -> Self {
        Self { quota: Quota::per_minute(n), max_principals: 100_000 }
    }

    /// The number of requests allowed at once.
    pub fn burst(&self) -> u32 {
        self.quota.burst_size().get()
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let period = self.quota.replenish_interval().saturating_mul(self.burst());
        if period >= Duration::from_secs(60) {
            write!(f, "{}/m", self.burst())
        } else {
            write!(f, "{}/s", self.burst())
        }
    }
}

/// A rate that is not `N/s` or `N/m` with `N` a positive integer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid rate {0:?}: expected N/s or N/m with N a positive integer")]
pub struct InvalidRate(String);

impl FromStr for RateLimit {
    type Err = InvalidRate;

    fn from_str(s: &str) -> Result<Self, InvalidRate> {
        let bad = || InvalidRate(s.to_owned());
        let (n, unit) = s.trim().split_once('/').ok_or_else(bad)?;
        let n: NonZeroU32 = n.trim().parse().map_err(|_| bad())?;
        match unit.trim() {
            "s" | "sec" | "second" => Ok(Self::per_second(n)),
            "m" | "min" | "minute" => Ok(Self::per_minute(n)),
            _ => Err(bad()),
        }
    }
}

/// Who a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Principal {
    /// An authenticated credential, by its label ([`PeerContext::principal`]).
    Peer(Box<str>),
    Ip(IpAddr),
    /// Clients beyond the table, and requests with no known address.
    Shared,
}

/// The limiter state shared by every request of a router.
#[derive(Clone)]
pub(crate) struct Limiter {
    inner: Arc<Inner>,
}

struct Inner {
    limiter: DefaultKeyedRateLimiter<Principal>,
    clock: DefaultClock,
    max_principals: usize,
    auth: BearerAuth,
    /// The attack signal: a line when the limit starts refusing, a few while it goes on, one when it stops.
    refusals: RefusalLog,
    /// Milliseconds since `epoch` of the last sweep of idle principals (sweeps cost one pass over the table).
    last_sweep: AtomicU64,
    epoch: Instant,
}

/// The shortest time between two sweeps of the table.
const SWEEP_INTERVAL_MS: u64 = 1000;

impl Limiter {
    pub(crate) fn new(rate: RateLimit, auth: BearerAuth) -> Self {
        Self {
            inner: Arc::new(Inner {
                limiter: DefaultKeyedRateLimiter::dashmap(rate.quota),
                clock: DefaultClock::default(),
                max_principals: rate.max_principals.max(1),
                auth,
                refusals: RefusalLog::new("the rate limit"),
                last_sweep: AtomicU64::new(0),
                epoch: Instant::now(),
            }),
        }
    }

    fn principal(&self, req: &Request) -> Principal {
        let known = req.extensions().get::<PeerContext>();
        if let Some(label) = known.and_then(PeerContext::principal) {
            return Principal::Peer(label.into());
        }
        let checked = self.inner.auth.authenticate(req.headers()).ok();
        if let Some(label) = checked.as_ref().and_then(PeerContext::principal) {
            // Labels of the token table or of tokens the issuer signed: bounded by who holds a credential.
            return Principal::Peer(label.into());
        }
        // The client's address as the edge found it (a trusted proxy's client), else the socket's peer.
        let address = known
            .and_then(|p| p.address)
            .or_else(|| req.extensions().get::<ConnectInfo<SocketAddr>>().map(|ConnectInfo(addr)| addr.ip()));
        let Some(address) = address else {
            return Principal::Shared;
        };
        let ip = ldp_session::source_of(address);
        let inner = &self.inner;
        if inner.limiter.len() >= inner.max_principals {
            let now = inner.epoch.elapsed().as_millis() as u64;
            let last = inner.last_sweep.load(Ordering::Relaxed);
            if now.saturating_sub(last) >= SWEEP_INTERVAL_MS
                && inner.last_sweep.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                inner.limiter.retain_recent();
                inner.limiter.shrink_to_fit();
            }
            if inner.limiter.len() >= inner.max_principals {
                return Principal::Shared;
            }
        }
        Principal::Ip(ip)
    }

    /// Principals currently tracked.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.inner.limiter.len()
    }
}

impl Limiter {
    /// Counts the request against its principal's quota: the 429 answer when it is over it.
    pub(crate) fn refusal(&self, req: &Request) -> Option<Response> {
        let principal = self.principal(req);
        match self.inner.limiter.check_key(&principal) {
            Ok(()) => {
                self.inner.refusals.tick(Instant::now());
                None
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.inner.clock.now());
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                tracing::debug!(?principal, ?wait, "request refused: rate limit");
                self.inner.refusals.refused(Instant::now());
                let error =
                    LdpError::runtime(codes::CAPACITY_EXCEEDED, format!("rate limit exceeded; retry in {secs} s"))
                        .with_retryable(true);
                Some(refusal_with_retry(StatusCode::TOO_MANY_REQUESTS, &error, secs))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_print() {
        let r: RateLimit = "50/s".parse().unwrap();
        assert_eq!((r.burst(), r.to_string()), (50, "50/s".to_owned()));
        let r: RateLimit = " 600 / m ".parse().unwrap();
        assert_eq!((r.burst(), r.to_string()), (600, "600/m".to_owned()));
        for bad in ["", "0/s", "-1/s", "10", "10/h", "x/s", "10/"] {
            assert!(bad.parse::<RateLimit>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_table_stays_bounded_under_many_addresses() {
        let mut rate = RateLimit::per_second(NonZeroU32::MIN);
        rate.max_principals = 8;
        let limiter = Limiter::new(rate, BearerAuth::default());
        for i in 0..1000u32 {
            let mut req = Request::new(axum::body::Body::empty());
            let addr = SocketAddr::from((std::net::Ipv4Addr::from(i), 1));
            req.extensions_mut().insert(ConnectInfo(addr));
            let principal = limiter.principal(&req);
            let _ = limiter.inner.limiter.check_key(&principal);
        }
        // The shared key may come on top of the table's own entries.
        assert!(limiter.tracked() <= 9, "{} principals tracked", limiter.tracked());
    }
}
