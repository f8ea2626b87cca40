//! Calling: one connection to a delegate, one session opened on first use and reused.

use std::sync::Arc;

use ldp_session::runtime::{Client, Progress, Submission, TaskOutcome, Transport};
use ldp_session::{InitiatorConfig, SecurityConfig, SeededIds, SessionError, SystemClock, TaskKey};
use ldp_transport_http::{ConnectOptions, ConnectSettings, HttpTransport};
#[cfg(feature = "ws")]
use ldp_transport_ws::WsTransport;
use ldp_types::signing::SigningKey;
use ldp_types::{IdentityCard, Provenance, RawJson, SessionConfig, codes};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::JoinHandle;

use crate::Error;

/// The delegate id a [`connect`]ed client sends as.
pub const CLIENT_ID: &str = "ldp:delegate:client";

/// Discovers the delegate at `url` (its identity card) and greets it (HELLO); the session is opened by the first
/// call. The transport follows the URL's scheme: `http(s)://` (SSE for [`Connection::stream`]) or `ws(s)://`.
/// [`connect_with`] takes tokens, signing, TLS and timeouts.
pub async fn connect(url: impl Into<String>) -> Result<Connection, Error> {
    connect_with(url, ClientOptions::default()).await
}

/// How a client connects and who it is ([`connect_with`]): one set of options for either transport. Who it is and
/// how it signs are set here; how it reaches the delegate (token, TLS, timeouts, retries) through the
/// [`ConnectSettings`] setters that the HTTP and WebSocket transports share.
///
/// ```
/// use std::time::Duration;
/// use ldp::{ClientOptions, ConnectSettings};
///
/// let options = ClientOptions::new()
///     .delegate_id("ldp:delegate:planner")
///     .bearer_token("s3cret")
///     .request_timeout(Duration::from_secs(30));
/// assert_eq!(options.connect.token.as_deref(), Some("s3cret"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    /// The delegate id the client sends as (default [`CLIENT_ID`]).
    pub delegate_id: String,
    /// The trust domain the client declares when it opens a session (default none). The Python reference SDK's
    /// delegate refuses a session that declares none that it trusts (its own, `default`).
    pub trust_domain: Option<String>,
    /// Signs every message with this key and requires the delegate's answers signed with it (or, for
    /// `ed25519-jcs`, with the matching public key), with replay protection on the answers.
    pub signing_key: Option<SigningKey>,
    /// How the transport reaches the delegate: token, TLS, timeouts, retries (HTTP) or reconnects (WebSocket),
    /// the largest answer.
    pub connect: ConnectOptions,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            delegate_id: CLIENT_ID.to_owned(),
            trust_domain: None,
            signing_key: None,
            connect: ConnectOptions::default(),
        }
    }
}

impl ConnectSettings for ClientOptions {
    fn connect_options_mut(&mut self) -> &mut ConnectOptions {
        &mut self.connect
    }
}

impl ClientOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends as `id` (`ldp:delegate:<name>`).
    #[must_use]
    pub fn delegate_id(mut self, id: impl Into<String>) -> Self {
        self.delegate_id = id.into();
        self
    }

    /// Declares `domain` as the client's trust domain when opening sessions.
    #[must_use]
    pub fn trust_domain(mut self, domain: impl Into<String>) -> Self {
        self.trust_domain = Some(domain.into());
        self
    }

    /// Signs with `key` and requires signed answers.
    #[must_use]
    pub fn signing_key(mut self, key: SigningKey) -> Self {
        self.signing_key = Some(key);
        self
    }

    /// The transport `url`'s scheme asks for, built from these options.
    async fn transport(&self, url: &str) -> Result<Arc<dyn Transport>, Error> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
        match scheme.as_str() {
            "http" | "https" => Ok(Arc::new(HttpTransport::with_options(url, self.connect.clone())?)),
            #[cfg(feature = "ws")]
            "ws" | "wss" => Ok(Arc::new(WsTransport::connect(url, self.connect.clone()).await?)),
            _ => Err(Error::UnsupportedScheme(url.to_owned())),
        }
    }
}

/// [`connect`] with `options`: the transport chosen by the URL's scheme (`http://`, `https://`, `ws://`, `wss://`),
/// the same [`Connection`] API on both.
pub async fn connect_with(url: impl Into<String>, options: ClientOptions) -> Result<Connection, Error> {
    let url = url.into();
    let transport = options.transport(&url).await?;
    let mut cfg = InitiatorConfig::new(options.delegate_id.as_str());
    cfg.trust_domain = options.trust_domain;
    if let Some(key) = options.signing_key {
        // The reference SDKs sign hmac-sha256 without a nonce and cannot verify one; our servers accept both.
        cfg.hmac_sha256_nonce = key.algorithm() != ldp_types::signing::SignatureAlgorithm::HmacSha256;
        cfg.security = SecurityConfig::symmetric(key);
    }
    let client = Client::connect(transport, cfg, Arc::new(SystemClock), Box::new(SeededIds::from_entropy())).await?;
    Ok(Connection { client: Arc::new(client), session: Mutex::new(None) })
}

/// A connection to one delegate ([`connect`], [`connect_with`]), over HTTP or WebSocket.
#[derive(Debug)]
pub struct Connection {
    client: Arc<Client<Arc<dyn Transport>>>,
    /// The session, once opened.
    session: Mutex<Option<String>>,
}

/// A task's output, read into `O`, with its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<O> {
    /// The output.
    pub output: O,
    /// Who produced it, with what, at what cost (RFC 6).
    pub provenance: Provenance,
}

/// What a streamed task reports, in order: partial output and progress while it runs, then its answer.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The next chunk of the output.
    Partial(RawJson),
    /// Progress.
    Progress {
        /// Fraction done, 0.0-1.0.
        progress: Option<f64>,
        /// A status message.
        message: Option<String>,
    },
    /// The task's whole output and provenance; the last event (boxed: it is by far the largest, and comes once).
    Done(Box<Answer<RawJson>>),
}

impl Connection {
    /// The delegate's identity card.
    pub fn card(&self) -> &IdentityCard {
        self.client.card()
    }

    /// The session-layer client underneath, for what this API does not cover (contracts, cancel, other sessions).
    pub fn client(&self) -> &Client<Arc<dyn Transport>> {
        &self.client
    }

    /// The session id, opening the session on first use.
    pub async fn session(&self) -> Result<String, Error> {
        let mut session = self.session.lock().await;
        if let Some(id) = session.as_ref() {
            return Ok(id.clone());
        }
        let info = self.client.propose(SessionConfig::default()).await?;
        *session = Some(info.session_id.clone());
        Ok(info.session_id)
    }

    /// Runs `skill` on `input` and reads the output into `O` (`serde_json::Value` takes any).
    pub async fn call<O: DeserializeOwned>(&self, skill: &str, input: impl Serialize) -> Result<Answer<O>, Error> {
        let input = encode(&input)?;
        let outcome = self.submit(skill, input).await?;
        typed(outcome)
    }

    /// Runs `skill` on `input`, yielding its partial output and progress as they come, then its answer.
    pub async fn stream(&self, skill: &str, input: impl Serialize) -> Result<Stream, Error> {
        let input = encode(&input)?;
        let session = self.session().await?;
        let (tx, rx) = mpsc::channel(64);
        let client = self.client.clone();
        let skill = skill.to_owned();
        let (key_tx, key_rx) = watch::channel(None);
        let done = tokio::spawn(async move {
            let submission = Submission::new(&session, &skill, input).progress(tx).on_key(move |key: &TaskKey| {
                // Nobody may hold a canceller any more; then nobody will cancel.
                let _ = key_tx.send(Some(key.clone()));
            });
            client.submit_task(submission).await
        });
        let canceller = Canceller { client: self.client.clone(), key: key_rx };
        Ok(Stream { updates: rx, done: Some(done), canceller })
    }

    /// Closes the session, if one is open (the next call opens another).
    pub async fn close(&self) -> Result<(), Error> {
        let session = self.session.lock().await.take();
        if let Some(id) = session {
            self.client.close(&id).await?;
        }
        Ok(())
    }

    /// Submits in the session; a session the delegate no longer has (expired, closed, forgotten) is replaced once.
    async fn submit(&self, skill: &str, input: RawJson) -> Result<TaskOutcome, Error> {
        let session = self.session().await?;
        let first = self.client.submit(&session, skill, input.clone(), None).await;
        match first {
            Err(SessionError::Peer(e))
                if [codes::SESSION_EXPIRED, codes::SESSION_CLOSED, codes::SESSION_NOT_FOUND]
                    .contains(&e.code.as_str()) =>
            {
                {
                    let mut current = self.session.lock().await;
                    if current.as_deref() == Some(session.as_str()) {
                        *current = None;
                    }
                }
                let session = self.session().await?;
                Ok(self.client.submit(&session, skill, input, None).await?)
            }
            other => Ok(other?),
        }
    }
}

fn encode(input: &impl Serialize) -> Result<RawJson, Error> {
    let json = serde_json::to_string(input).map_err(Error::Input)?;
    RawJson::from_json(json).map_err(|e| Error::Input(serde_json::Error::io(std::io::Error::other(e))))
}

fn typed<O: DeserializeOwned>(outcome: TaskOutcome) -> Result<Answer<O>, Error> {
    let output = serde_json::from_str(outcome.output.json()).map_err(Error::Output)?;
    Ok(Answer { output, provenance: outcome.provenance })
}

/// A streamed task ([`Connection::stream`]).
#[derive(Debug)]
pub struct Stream {
    updates: mpsc::Receiver<Progress>,
    done: Option<JoinHandle<Result<TaskOutcome, SessionError>>>,
    canceller: Canceller,
}

/// Cancels a streamed task from anywhere ([`Stream::canceller`]), while another future waits on the stream.
#[derive(Debug, Clone)]
pub struct Canceller {
    client: Arc<Client<Arc<dyn Transport>>>,
    /// The task's key, once the machine has chosen it (before the TASK_SUBMIT goes out).
    key: watch::Receiver<Option<TaskKey>>,
}

impl Canceller {
    /// Cancels the task (TASK_CANCEL): the delegate stops it and answers TASK_FAILED `CANCELLED`, which the stream
    /// then yields as its error. A task that has ended, or whose submission failed, is left as it is.
    pub async fn cancel(&self) -> Result<(), Error> {
        let mut key = self.key.clone();
        // An error: the submission ended before a key was chosen; there is nothing to cancel.
        let Ok(known) = key.wait_for(Option::is_some).await.map(|k| k.clone()) else { return Ok(()) };
        let Some(known) = known else { return Ok(()) };
        match self.client.cancel(&known).await {
            // The task ended before the cancel reached the machine: nothing to cancel.
            Err(SessionError::Misuse(_)) => Ok(()),
            other => Ok(other?),
        }
    }
}

impl Stream {
    /// Cancels the task ([`Canceller::cancel`]).
    pub async fn cancel(&self) -> Result<(), Error> {
        self.canceller.cancel().await
    }

    /// A handle that cancels the task while another future awaits [`Stream::next`].
    pub fn canceller(&self) -> Canceller {
        self.canceller.clone()
    }

    /// The next event; `None` after [`Event::Done`] or an error.
    pub async fn next(&mut self) -> Option<Result<Event, Error>> {
        if let Some(p) = self.updates.recv().await {
            return Some(Ok(match p.partial {
                Some(chunk) => Event::Partial(chunk),
                None => Event::Progress { progress: p.progress, message: p.message },
            }));
        }
        // Every update is in: the task has answered.
        let done = self.done.take()?;
        Some(match done.await {
            Ok(Ok(outcome)) => {
                Ok(Event::Done(Box::new(Answer { output: outcome.output, provenance: outcome.provenance })))
            }
            Ok(Err(e)) => Err(e.into()),
            Err(e) => Err(Error::Io(std::io::Error::other(e))),
        })
    }
}
