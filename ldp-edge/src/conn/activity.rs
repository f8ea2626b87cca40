//! Watching a connection's bytes: the activity its requests show (heads and bodies under way, idle since when),
//! the minimum transfer rate per window, and the stream wrapper that feeds it and answers a stalled head itself.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;

use crate::error::HttpError;

use super::{ConnectionLimits, REFUSAL_LINGER};

/// Bytes received in consecutive windows, for a minimum transfer rate.
#[derive(Debug, Clone, Copy)]
pub(super) struct RateWindow {
    /// When the current window ends (and is judged).
    pub(super) ends: Instant,
    /// Bytes received in it so far.
    pub(super) bytes: u64,
}

impl RateWindow {
    pub(super) fn new(now: Instant, window: Duration) -> Self {
        Self { ends: now + window, bytes: 0 }
    }

    /// Judges the window that just ended against `min_rate` bytes/s and starts the next one at `now` (not at the
    /// old end: time the server itself spent not reading, on a loaded machine, is not held against the peer).
    pub(super) fn roll(&mut self, min_rate: u64, window: Duration, now: Instant) -> bool {
        let needed = u128::from(min_rate) * window.as_millis() / 1000;
        let enough = u128::from(self.bytes) >= needed;
        *self = Self::new(now, window);
        enough
    }
}

/// What a connection's timer found due.
pub(super) enum Due {
    Nothing,
    /// Idle too long: close.
    Idle,
    /// The request head is too slow: answer this, then close.
    Head(HttpError),
}

/// What a connection is doing, for its timeouts and for eviction.
#[derive(Debug)]
pub(super) struct Activity {
    /// Requests whose response has not been sent completely.
    pub(super) in_flight: usize,
    /// When the connection last became idle (accepted, or its last response sent).
    pub(super) idle_since: Instant,
    /// When the first byte of the next request arrived, while no request was in progress.
    pub(super) head_started: Option<Instant>,
    /// The head's current rate window (meaningful while `head_started` is set).
    pub(super) head_window: RateWindow,
    /// While the body of the request in progress is still being read (no handler has the message yet): when the
    /// body started.
    pub(super) body_started: Option<Instant>,
    /// The rest of a body its handler dropped before the end, for the response to wait for (or give up on and
    /// close the connection): see [`unread_body`].
    pub(super) unread: Option<hyper::body::Incoming>,
    /// A too-slow head's answer, for the stream to write in place of further reads.
    pub(super) refusal: Option<Vec<u8>>,
    /// The deadline the connection's timer is set for, as its loop last published it; `None` while the loop wants
    /// to hear of every change (its timer is not set, it is shutting down or refusing a head).
    pub(super) timer_at: Option<Instant>,
}

impl Activity {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            in_flight: 0,
            idle_since: now,
            head_started: None,
            head_window: RateWindow::new(now, Duration::ZERO),
            body_started: None,
            unread: None,
            refusal: None,
            timer_at: None,
        }
    }

    /// Whether the connection's loop must wake for the change just made: only when it moved the deadline before
    /// the one its timer is set for, or the loop asked to hear of every change. A request's head and its answer
    /// each change the activity, and on a busy connection neither needs the loop (the deadline they make is later
    /// than the timer's, which finds nothing due when it fires and is set again): two wakes less per request.
    pub(super) fn wakes_timer(&self, limits: &ConnectionLimits) -> bool {
        match (self.timer_at, self.deadline(limits)) {
            (Some(armed), Some(at)) => at < armed,
            (Some(_), None) => false,
            (None, _) => true,
        }
    }

    /// When the connection is next due for a check; `None` while a request is in progress (the request timeout and
    /// the body limits bound that).
    pub(super) fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        if self.in_flight > 0 {
            return None;
        }
        Some(match self.head_started {
            Some(start) if limits.min_head_rate > 0 => (start + limits.header_timeout).min(self.head_window.ends),
            Some(start) => start + limits.header_timeout,
            None => self.idle_since + limits.idle_timeout,
        })
    }

    /// What is due at `now`; rolls the head's rate window when it has ended.
    pub(super) fn due(&mut self, limits: &ConnectionLimits, now: Instant) -> Due {
        if self.in_flight > 0 {
            return Due::Nothing;
        }
        match self.head_started {
            Some(start) if now >= start + limits.header_timeout => {
                Due::Head(HttpError::HeadTimeout(limits.header_timeout))
            }
            Some(_) if limits.min_head_rate > 0 && now >= self.head_window.ends => {
                if self.head_window.roll(limits.min_head_rate, limits.min_rate_window, now) {
                    Due::Nothing
                } else {
                    Due::Head(HttpError::HeadTooSlow { min_rate: limits.min_head_rate, window: limits.min_rate_window })
                }
            }
            Some(_) => Due::Nothing,
            None if now >= self.idle_since + limits.idle_timeout => Due::Idle,
            None => Due::Nothing,
        }
    }

    /// Since when the connection has been closable to make room (idle, handshaking, sending a head, or sending a
    /// body no handler has yet); `None` while a handler is serving it.
    pub(super) fn evictable_since(&self) -> Option<Instant> {
        if self.in_flight == 0 { Some(self.head_started.unwrap_or(self.idle_since)) } else { self.body_started }
    }
}

/// A connection's [`Activity`], a signal to its timer that the deadline moved, and one asking it to close if no
/// handler is serving it.
pub(super) struct Watched {
    pub(super) activity: Mutex<Activity>,
    pub(super) changed: Notify,
    pub(super) evict: Notify,
    pub(super) evicting: AtomicBool,
    /// The peer's address, for choosing whom to evict.
    pub(super) address: IpAddr,
}

pub(super) fn lock(watched: &Watched) -> MutexGuard<'_, Activity> {
    // Nothing panics while the lock is held; recover from poisoning anyway.
    watched.activity.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The connection's stream: notes when bytes of a new request start to arrive and counts them for the head's rate,
/// and, once a head was found too slow, writes the `408` in place of further reads.
pub(super) struct Tracked<T> {
    pub(super) inner: T,
    pub(super) activity: Arc<Watched>,
    pub(super) limits: Arc<ConnectionLimits>,
    pub(super) refusing: Option<Refusing>,
    pub(super) _slot: OwnedSemaphorePermit,
}

/// A `408` being written to a peer whose head was too slow, then the peer's remaining bytes being drained (closing
/// with unread data would reset the connection and could lose the answer), all within [`REFUSAL_LINGER`].
pub(super) struct Refusing {
    pub(super) answer: Vec<u8>,
    pub(super) written: usize,
    pub(super) shut: bool,
    pub(super) drained: usize,
    pub(super) linger: Pin<Box<tokio::time::Sleep>>,
}

/// Bytes of a refused peer's request read and discarded at most.
pub(super) const REFUSAL_DRAIN_BYTES: usize = 64 * 1024;

impl Refusing {
    /// Drives the refusal; ends with an error for hyper, which then closes the connection.
    pub(super) fn poll<T: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        io: &mut T,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Error> {
        let done =
            || Poll::Ready(std::io::Error::new(std::io::ErrorKind::TimedOut, "request head refused as too slow"));
        if self.linger.as_mut().poll(cx).is_ready() {
            return done();
        }
        while self.written < self.answer.len() {
            match Pin::new(&mut *io).poll_write(cx, &self.answer[self.written..]) {
                Poll::Ready(Ok(n)) if n > 0 => self.written += n,
                Poll::Ready(_) => return done(),
                Poll::Pending => return Poll::Pending,
            }
        }
        if !self.shut {
            match Pin::new(&mut *io).poll_shutdown(cx) {
                Poll::Ready(_) => self.shut = true,
                Poll::Pending => return Poll::Pending,
            }
        }
        let mut sink = [0u8; 4096];
        while self.drained < REFUSAL_DRAIN_BYTES {
            let mut buf = ReadBuf::new(&mut sink);
            match Pin::new(&mut *io).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => self.drained += buf.filled().len(),
                Poll::Ready(_) => return done(),
                Poll::Pending => return Poll::Pending,
            }
        }
        done()
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tracked<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.refusing.is_none()
            && let Some(answer) = lock(&this.activity).refusal.take()
        {
            this.refusing = Some(Refusing {
                answer,
                written: 0,
                shut: false,
                drained: 0,
                linger: Box::pin(tokio::time::sleep(REFUSAL_LINGER)),
            });
        }
        if let Some(refusing) = &mut this.refusing {
            return refusing.poll(&mut this.inner, cx).map(Err);
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if matches!(polled, Poll::Ready(Ok(()))) && read > 0 {
            let mut activity = lock(&this.activity);
            if activity.in_flight == 0 {
                if activity.head_started.is_none() {
                    let now = Instant::now();
                    activity.head_started = Some(now);
                    activity.head_window = RateWindow::new(now, this.limits.min_rate_window);
                    activity.head_window.bytes = read as u64;
                    let wake = activity.wakes_timer(&this.limits);
                    drop(activity);
                    if wake {
                        this.activity.changed.notify_one();
                    }
                } else {
                    activity.head_window.bytes = activity.head_window.bytes.saturating_add(read as u64);
                }
            }
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Tracked<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request in progress; when dropped (its response body sent, or abandoned), the connection is idle again.
pub(super) struct InFlight {
    pub(super) activity: Arc<Watched>,
    limits: Arc<ConnectionLimits>,
}

impl InFlight {
    /// `reading_body`: the request has a body still to arrive, during which the connection stays closable.
    pub(super) fn start(activity: &Arc<Watched>, limits: &Arc<ConnectionLimits>, reading_body: bool) -> Self {
        let mut a = lock(activity);
        a.in_flight += 1;
        a.head_started = None;
        a.body_started = reading_body.then(Instant::now);
        // A body an earlier handler held past its answer is not this request's.
        a.unread = None;
        drop(a);
        Self { activity: Arc::clone(activity), limits: Arc::clone(limits) }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut a = lock(&self.activity);
        a.in_flight = a.in_flight.saturating_sub(1);
        a.idle_since = Instant::now();
        a.body_started = None;
        let wake = a.wakes_timer(&self.limits);
        drop(a);
        if wake {
            self.activity.changed.notify_one();
        }
    }
}

/// The request has been read (or given up on), and a handler has it: the connection is no longer closable.
pub(super) fn body_read(activity: &Watched) {
    lock(activity).body_started = None;
}

/// What is left of a request body once its handler has answered.
pub(super) enum Unread {
    /// The handler dropped the body before its end; here is the rest.
    Dropped(hyper::body::Incoming),
    /// The body is still held (by the response, say) or was never asked for (`Expect: 100-continue`).
    Held,
}

/// Whether the request's body was left unread by its handler, and what of it: `None` when it was read to its end
/// (or failed). Left unread, the body is still being sent, so the connection stays closable.
pub(super) fn unread_body(activity: &Watched) -> Option<Unread> {
    let mut a = lock(activity);
    a.body_started?;
    Some(a.unread.take().map_or(Unread::Held, Unread::Dropped))
}
