//! The runtime as a transport sees it: what the machine says about connections, held answers and its own state,
//! asked by name. Transports that keep connections open (WebSocket) call these instead of reaching into the
//! [`Responder`](crate::Responder), so the rules of resume stay in the machine.

use ldp_types::IdentityCard;

use super::DelegateRuntime;
use crate::{HeldAnswer, HeldStats, Limits, SessionState};

/// What `/metrics` and health checks read of the machine, in one look.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeGauges {
    /// Sessions held (every state but closed).
    pub sessions: usize,
    /// Tasks running.
    pub running: usize,
    /// Messages the replay window remembers now, and the most it may hold (both 0 with replay protection off).
    pub replay_window: (usize, usize),
    /// Answers held for suspended sessions.
    pub held: HeldStats,
}

impl DelegateRuntime {
    /// Connection `connection` has ended: the sessions it carried are suspended, and answers that complete
    /// meanwhile are held for their resume ([`DelegateRuntime::hold`]).
    pub fn connection_closed(&self, connection: u64) {
        self.with_responder(|r| r.suspend_connection(connection));
    }

    /// The connection that carries `session` now, if it is live on one.
    pub fn carrier(&self, session: &str) -> Option<u64> {
        self.with_responder(|r| r.connection_of(session))
    }

    /// Keeps an answer that could not be delivered (its connection ended) until `session` resumes, within the
    /// machine's bounds ([`Limits::held`]).
    pub fn hold(&self, session: &str, task_id: &str, json: String) {
        let now = self.now();
        self.with_responder(|r| r.hold(now, session, task_id, json));
    }

    /// After a message on `connection`: the answers held for `session`, to write before the reply, when the message
    /// made the session live on that connection; nothing otherwise (the session is still away, moved elsewhere,
    /// or closed, which forgets its answers). Each answer is handed out once.
    pub fn held_for(&self, session: &str, connection: u64) -> Vec<HeldAnswer> {
        self.with_responder(|r| match r.connection_of(session) {
            Some(carrier) if carrier == connection => r.take_held(session),
            _ => Vec::new(),
        })
    }

    /// The machine's gauges.
    pub fn gauges(&self) -> RuntimeGauges {
        self.with_responder(|r| RuntimeGauges {
            sessions: r.session_count(),
            running: r.running_tasks(),
            replay_window: r.replay_window(),
            held: r.held_stats(),
        })
    }

    /// Tasks running now.
    pub fn running_tasks(&self) -> usize {
        self.with_responder(|r| r.running_tasks())
    }

    /// The state of `session`, if the machine holds it.
    pub fn session_state(&self, session: &str) -> Option<SessionState> {
        self.with_responder(|r| r.session_state(session))
    }

    /// The limits the machine enforces.
    pub fn limits(&self) -> Limits {
        self.with_responder(|r| r.config().limits.clone())
    }

    /// The identity card served, without a copy: `f` reads it under the machine's lock.
    pub fn with_card<R>(&self, f: impl FnOnce(&IdentityCard) -> R) -> R {
        self.with_responder(|r| f(&r.config().card))
    }

    /// Tests only (feature `test-support`): runs `f` on the session machine, as the runtime does, for tests that
    /// drive it directly. Transports use the named methods above.
    #[cfg(feature = "test-support")]
    pub fn machine<R>(&self, f: impl FnOnce(&mut crate::Responder) -> R) -> R {
        self.with_responder(f)
    }
}
