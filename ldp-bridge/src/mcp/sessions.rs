//! MCP sessions, bounded: the SDK's in-memory session manager with a cap on how many exist at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker, SessionConfig,
};
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};

/// Why a bounded session manager refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionsError {
    /// As many MCP sessions as allowed are open.
    #[error("{0} MCP sessions are open, the most allowed")]
    Full(usize),
    /// The SDK's session manager failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// [`LocalSessionManager`] holding at most `max` sessions; each closes after its idle time (the SDK's keep-alive).
#[derive(Debug)]
pub struct BoundedSessions {
    inner: LocalSessionManager,
    max: usize,
    /// Initializes refused for want of room, ever: the HTTP layer turns the SDK's answer to them into a 503.
    refused: AtomicU64,
}

impl BoundedSessions {
    /// At most `max` sessions, each closed after `idle` without a request.
    pub fn new(max: usize, idle: std::time::Duration) -> Self {
        let mut inner = LocalSessionManager::default();
        let mut config = SessionConfig::default();
        config.keep_alive = Some(idle);
        inner.session_config = config;
        Self { inner, max: max.max(1), refused: AtomicU64::new(0) }
    }

    /// The most sessions held at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// How many initializes were refused because the table was full, since the start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Sessions open now.
    pub async fn len(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// Whether no session is open.
    pub async fn is_empty(&self) -> bool {
        self.len().await == 0
    }
}

impl SessionManager for BoundedSessions {
    type Error = SessionsError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Checked before creating: concurrent initializes can overshoot by the number in flight, which the HTTP
        // connection cap bounds.
        if self.len().await >= self.max {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(SessionsError::Full(self.max));
        }
        Ok(SessionManager::create_session(&self.inner).await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(SessionManager::initialize_session(&self.inner, id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(SessionManager::has_session(&self.inner, id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(SessionManager::close_session(&self.inner, id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::create_stream(&self.inner, id, message).await?)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(SessionManager::accept_message(&self.inner, id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::create_standalone_stream(&self.inner, id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(SessionManager::resume(&self.inner, id, last_event_id).await?)
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(SessionManager::restore_session(&self.inner, id).await?)
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        SessionManager::event_store(&self.inner)
    }
}
